"""A program that compiles (torch.compile, fullgraph=True) entered as a command: measured compiled, counted in a run
of its own with compilation off, its compile step set apart from the steady state (CPU tier; the GPU tier compares its
kernels with a plain nsys run of the same command)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest
from conftest import ROOT, snakemake, steady_steps, torch_workflow

PROGRAM = ROOT / "tests" / "programs" / "compiled_steps.py"
STEPS, HIDDEN, BATCH = 4, 64, 8


def _flops_per_step() -> int:
    """Two matmuls a step: (batch x hidden) @ (hidden x 4·hidden), then (batch x 4·hidden) @ (4·hidden x hidden)."""
    return 2 * (2 * BATCH * HIDDEN * 4 * HIDDEN)


def _argv() -> list[str]:
    return [sys.executable, str(PROGRAM), "--steps", str(STEPS), "--hidden", str(HIDDEN), "--batch", str(BATCH)]


def test_a_compiled_command_is_measured_compiled_and_counted_apart(tmp_path):
    alone = subprocess.run(_argv(), capture_output=True, text=True, check=True)
    assert alone.stdout.splitlines()[-1] == "graphs 1"  # the program alone compiles its step once
    work = torch_workflow(tmp_path, [{"name": "compiled", "command": _argv()}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "compiled"
    manifest = json.loads((run / "manifest.json").read_text())
    # Its first step compiled: set apart, with the reason; the rest are the stage.
    first = manifest["warmup_steps"][0]
    assert first["stage"] == "decode" and first["step"] == 0 and "torch.compile made 1 graph(s)" in first["why"]
    steady = steady_steps(run, "decode", STEPS)
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert int(stages.loc["decode", "range_instances"]) == steady
    # Counted with compilation off (the counting mode would make torch.compile skip, or fail with fullgraph=True).
    assert stages.loc["decode", "flops_analytic"] == _flops_per_step() * steady
    assert "compilation off" in manifest["analytic_how"] and "compiles" in manifest["analytic_how"]
    # Measured compiled: torch.profiler's trace has the compiled region inside the stage's steps.
    trace = json.loads((run / "torch" / "trace.json").read_text())
    names = [e.get("name", "") for e in trace["traceEvents"]]
    assert any(n.startswith("Torch-Compiled Region") for n in names)
    page = (run / "report.html").read_text()
    assert "warm-up step(s) set apart" in page and "torch.compile made 1 graph(s)" in page
    assert "<h3>Wall time per step (the program's timed run)</h3><img alt='wall time per step'" in page


@pytest.mark.parametrize("gate_at", ["start", "contact"])
def test_the_profiled_launch_of_a_compiled_command_runs_it_compiled(tmp_path, gate_at):
    """The launch nsys wraps (here with no profiler: the same hook, the same gate, passed before the program's first
    line or at its first contact) runs the program compiled once the timed run saw it compile: no TorchDispatchMode in
    its steps, so torch.compile makes its graph as alone."""
    from nsightflow.capture.inside.hook_settings import HookSettings
    from nsightflow.capture.launch.command import timed_beside
    from nsightflow.capture.launch.command_call import CommandCall
    from nsightflow.capture.launch.discovery import primary

    call = CommandCall(command=_argv())
    probe = HookSettings("probe", str(tmp_path / "probe.json"), flops_out=str(tmp_path / "flops.json"))
    probe = replace(probe, gate_at=gate_at)
    found, timed, runs = timed_beside(call, str(tmp_path), tmp_path / "log", 300, probe, [])
    profiled = primary(runs, 0)
    assert found.compiles and found.skip["decode"][:1] == [0]  # its compile step set apart (a slow next one may be)
    assert profiled["mode"] == "ranged" and profiled["compiled_graphs"] == 1
    assert "graphs 1" in profiled["output"]
    assert len(profiled["steps"]["decode"]) == len(found.walls["decode"])  # the warm-up step only followed
    assert not (tmp_path / "flops.json").exists()  # counted in a run of its own
