"""A command that opens no NVTX range: its stages are its training iterations (between optimizer steps) and its
top-level model calls outside them, by gradient mode and input shape (nsightflow.capture.inside.hook_auto). CPU tier."""

from __future__ import annotations

import json
import shutil
import sys

import pandas as pd
import pytest
from conftest import ROOT, snakemake, steady_steps, torch_workflow

from nsightflow.capture.launch.discovery import MAX_SHAPES, discover
from nsightflow.domains import AUTO_DOMAIN
from nsightflow.errors import WorkloadError

PROGRAM = ROOT / "tests" / "programs" / "no_ranges.py"
STEPS, ACCUM, EVAL_EVERY, EVAL_BATCHES, HIDDEN, BATCH, PROMPT = 4, 2, 2, 2, 64, 8, 16


def _mm(tokens: int) -> int:
    """FLOPs of one of the MLP's two matmuls over ``tokens`` rows: (tokens x hidden) by (hidden x 4·hidden)."""
    return 2 * tokens * HIDDEN * 4 * HIDDEN


def _argv(*more: str) -> list[str]:
    sizes = ["--steps", str(STEPS), "--hidden", str(HIDDEN), "--batch", str(BATCH), "--prompt", str(PROMPT)]
    return [sys.executable, str(PROGRAM), *sizes, *more]


def test_a_training_script_without_ranges_reports_its_iterations_and_evaluation_apart(tmp_path):
    work = torch_workflow(tmp_path, [{"name": "train", "command": _argv("--mode", "train")}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "train"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stage_domain"] == AUTO_DOMAIN and "optimizer steps" in manifest["stage_domain_how"]
    evaluation = f"inference {BATCH}x{HIDDEN}"  # the evaluation's model calls, under torch.no_grad()
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert set(stages.index) == {"iteration", evaluation}
    iterations = steady_steps(run, "iteration", STEPS)
    evals = steady_steps(run, evaluation, EVAL_BATCHES * len(range(0, STEPS, EVAL_EVERY)))
    assert int(stages.loc["iteration", "range_instances"]) == iterations
    # An iteration: ACCUM micro steps of forward (2 matmuls) and backward (the second layer's input and weight
    # gradients, the first layer's weight gradient: 3 more), the optimizer's step elementwise (0 matrix FLOPs).
    assert stages.loc["iteration", "flops_analytic"] == iterations * ACCUM * 5 * _mm(BATCH)
    assert stages.loc[evaluation, "flops_analytic"] == evals * 2 * _mm(BATCH)
    page = (run / "report.html").read_text()
    assert "Automatic stages (the program opened no NVTX range)" in page


def test_a_generation_script_without_ranges_gets_prefill_and_decode_apart(tmp_path):
    """Run from its own folder (``cwd:``), by a relative path, as a user runs a script of a project checked out
    elsewhere: the hook's records and the profilers' outputs still land in the run's results."""
    own = tmp_path / "project"
    own.mkdir()
    shutil.copy(PROGRAM, own / "generate.py")
    argv = [sys.executable, "generate.py", *_argv("--mode", "generate")[2:]]
    work = torch_workflow(tmp_path, [{"name": "gen", "command": argv, "cwd": str(own)}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "gen"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    prefill, decode = f"inference 1x{PROMPT}x{HIDDEN}", f"inference 1x1x{HIDDEN}"
    assert set(stages.index) == {prefill, decode}
    assert sorted(p.name for p in own.iterdir()) == ["generate.py"]  # nothing of nsightflow's left there
    assert stages.loc[prefill, "flops_analytic"] == 2 * _mm(PROMPT)
    decodes = steady_steps(run, decode, STEPS)
    assert stages.loc[decode, "flops_analytic"] == decodes * 2 * _mm(1)


def test_calls_of_many_shapes_are_one_stage_and_a_domain_the_program_never_opens_is_named():
    calls = [[AUTO_DOMAIN, f"inference 1x{n}", 0, 1, 100 * n, 100 * n + 50] for n in range(1, MAX_SHAPES + 2)]
    found = discover({"ranges": calls}, None, None)
    assert found.stages == ["inference"] and len(found.walls["inference"]) == MAX_SHAPES + 1
    assert discover({"ranges": calls}, AUTO_DOMAIN, ["inference"]).stages == ["inference"]
    with pytest.raises(WorkloadError, match="remove domain: and stages:"):
        discover({"ranges": calls}, "LLM", ["decode"])
