"""Corpus tier: public programs nobody here wrote, run as their users run them, checked against their own numbers.

Their code is never committed: NSIGHTFLOW_CORPUS names a folder holding a snapshot of each (``nanoGPT/``: karpathy/
nanoGPT, MIT licence), and a test copies it into its own folder, makes its data synthetically (no download) and runs
the whole workflow over its unmodified command. On a CPU through torch.profiler; with ``-m gpu`` under nsys and ncu.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, corpus_dir, snakemake, steady_steps

from nsightflow.domains import AUTO_DOMAIN

pytestmark = pytest.mark.corpus

# A small GPT: nanoGPT's own configuration keys, set on its command line as its README does.
NANO = {"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 64, "batch_size": 4, "gradient_accumulation_steps": 2}
VOCAB, ITERS, EVAL_ITERS = 512, 6, 2


def _nanogpt(tmp_path: Path, device: str) -> tuple[Path, list[str]]:
    """A copy of nanoGPT with a synthetic dataset, and its command line (evaluation at iteration 0 only)."""
    corpus = corpus_dir()
    assert corpus is not None and (corpus / "nanoGPT" / "train.py").is_file(), "NSIGHTFLOW_CORPUS lacks nanoGPT/"
    folder = tmp_path / "nanoGPT"
    shutil.copytree(corpus / "nanoGPT", folder, ignore=shutil.ignore_patterns(".git", "assets", "*.ipynb"))
    data = folder / "data" / "synthetic"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        rng.integers(0, VOCAB, 20_000, dtype=np.uint16).tofile(data / f"{split}.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": VOCAB}))
    fixed = {"dataset": "synthetic", "max_iters": ITERS, "eval_interval": 1000, "eval_iters": EVAL_ITERS}
    fixed |= {"log_interval": 1, "compile": False, "always_save_checkpoint": False, "device": device}
    fixed |= {"dtype": "float32" if device == "cpu" else "bfloat16", "warmup_iters": 0}
    argv = [sys.executable, "train.py"] + [f"--{k}={v}" for k, v in {**NANO, **fixed}.items()]
    return folder, argv


def _nanogpt_counts() -> tuple[float, float]:
    """nanoGPT's own FLOPs (its estimate_mfu: 6N + 12·L·H·Q·T per token, N the parameters less the position
    embedding) for one training iteration, and for one evaluation call (forward: a third of it)."""
    L, C, T, V = NANO["n_layer"], NANO["n_embd"], NANO["block_size"], VOCAB
    per_block = 2 * C + 3 * C * C + C * C + 2 * C + 4 * C * C + 4 * C * C  # ln_1, c_attn, c_proj, ln_2, mlp
    n = V * C + L * per_block + C  # wte (tied to lm_head), the blocks, ln_f
    per_token = 6 * n + 12 * L * C * T
    tokens = NANO["batch_size"] * T
    return per_token * tokens * NANO["gradient_accumulation_steps"], per_token * tokens / 3


def _workflow(tmp_path: Path, workload: dict, profiler: str) -> Path:
    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    cfg.update(workloads=[workload], profiler=profiler)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return work


def _check_nanogpt(run: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stage_domain"] == AUTO_DOMAIN  # nanoGPT opens no NVTX range
    evaluation = f"inference {NANO['batch_size']}x{NANO['block_size']}"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert set(stages.index) == {"iteration", evaluation}, stages.index.tolist()
    counts = json.loads((run / "analytic_flops.json").read_text())["stages"]
    per_iteration, per_eval = _nanogpt_counts()
    iterations = steady_steps(run, "iteration", ITERS + 1)  # nanoGPT runs iterations 0..max_iters
    evals = steady_steps(run, evaluation, 2 * EVAL_ITERS)  # train and val splits
    got_it = counts["iteration"]["flops"] / iterations
    got_eval = counts[evaluation]["flops"] / evals
    print(f"nanoGPT: FLOPs per iteration {got_it:.6g} vs its estimate_mfu count {per_iteration:.6g} "
          f"({got_it / per_iteration - 1:+.3%}); per evaluation call {got_eval:.6g} vs {per_eval:.6g} "
          f"({got_eval / per_eval - 1:+.3%})")  # fmt: skip
    assert abs(got_it / per_iteration - 1) < 0.01 and abs(got_eval / per_eval - 1) < 0.01


def test_nanogpt_as_published_on_a_cpu(tmp_path):
    folder, argv = _nanogpt(tmp_path, "cpu")
    work = _workflow(tmp_path, {"name": "nanogpt", "command": argv, "cwd": str(folder)}, "torch")
    snakemake(work, "--cores", "1", "results/report.html")
    _check_nanogpt(work / "results" / "nanogpt")


@pytest.mark.gpu
def test_nanogpt_as_published_under_nsys_and_ncu(tmp_path):
    folder, argv = _nanogpt(tmp_path, "cuda")
    work = _workflow(tmp_path, {"name": "nanogpt", "command": argv, "cwd": str(folder)}, "nsight")
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "nanogpt"
    _check_nanogpt(run)
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    print(stages.T.to_string())
    # the GPU ran at least the model's matrix FLOPs of an iteration (tile padding adds, nothing removes)
    assert stages.loc["iteration", "flops_tensor_measured"] >= 0.99 * stages.loc["iteration", "flops_analytic"]
