"""A HuggingFace ``Trainer`` script (tests/programs/trainer_steps.py: the Trainer is transformers' code, the script a
user's, with a callback opening an NVTX range per training step) entered as a command from its own folder by a
relative path (``cwd:``), checked against the Trainer's own FLOP estimate. CPU tier; the same on a GPU under nsys
and ncu in test_gpu.py."""

from __future__ import annotations

import json
import shutil
import sys

import pandas as pd
from conftest import ROOT, snakemake, steady_steps, torch_workflow

PROGRAM = ROOT / "tests" / "programs" / "trainer_steps.py"
STEPS = 6


def trainer_workload(tmp_path, *more: str) -> tuple[dict, object]:
    """The Trainer script copied into a folder of its own, run there by a relative path; where it writes its own
    numbers."""
    folder = tmp_path / "program"
    folder.mkdir(parents=True)
    shutil.copy(PROGRAM, folder / PROGRAM.name)
    out = tmp_path / "trainer.json"
    argv = [sys.executable, PROGRAM.name, "--steps", str(STEPS), "--out", str(out), *more]
    return {"name": "trainer", "command": argv, "cwd": str(folder)}, out


def test_a_trainer_with_a_range_per_step_callback_is_counted_as_the_trainer_counts(tmp_path):
    """Its steps are the callback's ranges; the model's GEMM FLOPs per step are within 1% of the Trainer's own
    ``total_flos`` per step (6 · parameters outside the embeddings · tokens: the norms' weights are the gap); nothing
    of nsightflow's is left in the program's folder."""
    workload, out = trainer_workload(tmp_path, "--cpu")
    work = torch_workflow(tmp_path, [workload])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "trainer"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stage_domain"] == "trainer"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert list(stages.index) == ["train_step"]
    steps = steady_steps(run, "train_step", STEPS)
    theirs = json.loads(out.read_text())
    assert theirs["steps"] == STEPS
    ours = stages.loc["train_step", "flops_analytic_gemm"] / steps
    per_step = theirs["total_flos"] / theirs["steps"]
    print(f"Trainer: GEMM FLOPs a step {ours:.6g}, its total_flos a step {per_step:.6g} ({ours / per_step - 1:+.3%})")
    assert abs(ours / per_step - 1) < 0.01
    assert stages.loc["train_step", "mfu_busy"] > 0
    left = sorted(p.name for p in (tmp_path / "program").iterdir())
    assert left == [PROGRAM.name], left  # the program's own folder: its script, nothing of nsightflow's
