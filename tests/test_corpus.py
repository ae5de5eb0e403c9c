"""Corpus tier: public programs nobody here wrote, run as their users run them, checked against their own numbers.

Their code is never committed: NSIGHTFLOW_CORPUS names a folder holding a snapshot of each (``nanoGPT/``: karpathy/
nanoGPT, MIT licence; ``gpt-fast/``: pytorch-labs/gpt-fast, BSD-3-Clause), and a test copies it into its own folder,
makes its data, checkpoint and tokenizer synthetically (no download) and runs the whole workflow over its command: as
published, or with the few NVTX lines a user adds by NVIDIA's guide. On a CPU through torch.profiler; with
``-m gpu`` under nsys and ncu.
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import (
    copy_workflow,
    corpus_dir,
    kernels_per_range,
    plain_nsys,
    snakemake,
    sql_launches,
    steady_steps,
    tuned_env,
)

from nsightflow.capture.inside import step_clock
from nsightflow.capture.launch import ncu
from nsightflow.capture.read import ncu_csv
from nsightflow.capture.read.matching import name_key
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


def _nanogpt_counts(ranks: int = 1) -> tuple[float, float]:
    """nanoGPT's own FLOPs (its estimate_mfu: 6N + 12·L·H·Q·T per token, N the parameters less the position
    embedding) for one training iteration of one of ``ranks`` processes (train.py divides its micro steps among
    them), and for one evaluation call (forward: a third of one micro step's)."""
    L, C, T, V = NANO["n_layer"], NANO["n_embd"], NANO["block_size"], VOCAB
    per_block = 2 * C + 3 * C * C + C * C + 2 * C + 4 * C * C + 4 * C * C  # ln_1, c_attn, c_proj, ln_2, mlp
    n = V * C + L * per_block + C  # wte (tied to lm_head), the blocks, ln_f
    per_token = 6 * n + 12 * L * C * T
    tokens = NANO["batch_size"] * T
    return per_token * tokens * NANO["gradient_accumulation_steps"] // ranks, per_token * tokens / 3


def _workflow(tmp_path: Path, workload: dict, profiler: str) -> Path:
    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    cfg.update(workloads=[workload], profiler=profiler)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return work


def _check_nanogpt(run: Path, ranks: int = 1) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stage_domain"] == AUTO_DOMAIN  # nanoGPT opens no NVTX range
    evaluation = f"inference {NANO['batch_size']}x{NANO['block_size']}"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert set(stages.index) == {"iteration", evaluation}, stages.index.tolist()
    counts = json.loads((run / "analytic_flops.json").read_text())["stages"]
    per_iteration, per_eval = _nanogpt_counts(ranks)
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
    _ncu_started_once(run)
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    print(stages.T.to_string())
    # the GPU ran at least the model's matrix FLOPs of an iteration (tile padding adds, nothing removes)
    assert stages.loc["iteration", "flops_tensor_measured"] >= 0.99 * stages.loc["iteration", "flops_analytic"]


def _ncu_started_once(run: Path) -> None:
    """The counters and kernel filter ncu started with before its plan existed were the plan's: one start of ncu
    (nsightflow.capture.launch.ncu_capture; a second start repeats the program's start-up under ncu)."""
    log = (run / "logs" / "ncu_capture.log").read_text()
    assert "ncu started again" not in log, log[log.find("the capture plan, made while") :][:600]


@pytest.mark.gpu
def test_nanogpt_as_published_under_torchrun_on_two_gpus(tmp_path):
    """nanoGPT's DDP training as its README starts it (torchrun, NCCL, one GPU a rank): each rank's iterations (its
    half of the micro steps) counted as its own estimate_mfu counts them, rank 0's evaluation apart."""
    from nsightflow.capture.launch.gpus import visible

    if visible() < 2:  # CUDA_VISIBLE_DEVICES counted: nvidia-smi lists every GPU of the host
        pytest.skip("needs at least two visible GPUs")
    folder, argv = _nanogpt(tmp_path, "cuda")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    workload = {"name": "nanogpt", "command": torchrun + argv[1:], "cwd": str(folder), "gpus": 2}
    work = _workflow(tmp_path, workload, "nsight")
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "nanogpt"
    _check_nanogpt(run, ranks=2)
    _ncu_started_once(run)  # its ranks' NCCL kernels left out from the start
    ranks = pd.read_csv(run / "ranks.csv")
    print(ranks.to_string())
    assert set(ranks["rank"]) == {0, 1} and set(ranks["device"]) == {"cuda:0", "cuda:1"}
    # busy is of the same (steady) steps as the wall, kernels at once counted once: within the wall, beside the
    # timeline's own slowing (its run is not the timed one; rank 0 once showed 300 ms busy against a 62 ms wall)
    ran = ranks[ranks["steps"] > 0]
    assert (ran["gpu_busy_ms"] <= 1.5 * ran["wall_ms"]).all()
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert stages.loc["iteration", "flops_tensor_measured"] >= 0.99 * stages.loc["iteration", "flops_analytic"]


# gpt-fast's stories15M shape (its model.py), under a folder name that also picks its tiktoken tokenizer.
GPT_FAST = {"n_layer": 6, "dim": 288, "intermediate": 768, "vocab": 32000}
PROMPT, NEW, SAMPLES = 32, 8, 2
STAGES = ("prefill", "decode")
# nsightflow's walls of a steady sample over gpt-fast's own time for it: its ranges lie inside the interval it times,
# which also holds its set-up and copies outside them (2-3% of a sample on a CPU, 10-13% on an H100, where a sample
# is 10-20 ms of host-bound launches)
OWN_CLOCK = (0.8, 1.0)
LONG = 200  # timing a decode step by gpt-fast's own clock: LONG new tokens, in rounds with NEW
OWN_ROUNDS = {"cpu": 5, "cuda": 99}  # rounds of both lengths (a GPU's round takes a tenth of a second a turn)
OWN_STEP = 0.05  # nsightflow's steady decode pace (start to next start, stages.csv pace_ms) within 5% of its own step
SAMPLED = 0.02  # the sampled step clock's steady mean pace and walls' sum within 2% of every step clocked
REFERENCE_S = 900  # ncu over the last sample's launches
GUARD = 32  # launches before the last sample profiled too: the run under ncu may launch a few fewer before it
RANGES = [  # (a line of generate.py, the lines a user puts around it); the same indentation
    ("next_token = prefill(model, prompt.view(batch_size, -1), input_pos, **sampling_kwargs).clone()", "prefill"),
    ("next_token, next_prob = decode_one_token(", "decode"),
]


def _gpt_fast(tmp_path: Path, device: str, compile_: bool) -> tuple[Path, list[str]]:
    """A copy of gpt-fast with NVTX ranges around its prefill and each decode step, a random stories15M-shaped
    checkpoint and a tiktoken file of as many tokens as its vocabulary; its generate.py command line."""
    corpus = corpus_dir()
    assert corpus is not None and (corpus / "gpt-fast" / "generate.py").is_file(), "NSIGHTFLOW_CORPUS lacks gpt-fast/"
    folder = tmp_path / "gpt-fast"
    shutil.copytree(corpus / "gpt-fast", folder, ignore=shutil.ignore_patterns(".git"))
    src = (folder / "generate.py").read_text()
    for line, stage in RANGES:
        at = src.index(line)
        start = src.rindex("\n", 0, at) + 1
        indent = src[start:at]
        end = src.index("cur_token = next_token.clone()", at) if stage == "decode" else at
        end = src.index("\n", end) + 1
        pushed = f'{indent}nvtx.push_range("{stage}", domain="LLM")\n'
        src = src[:start] + pushed + src[start:end] + f'{indent}nvtx.pop_range(domain="LLM")\n' + src[end:]
    (folder / "generate.py").write_text("import nvtx\n" + src)
    ckpt = folder / "checkpoints" / "stories15M-llama-3"
    ckpt.mkdir(parents=True)
    make = (
        "import torch; from model import Transformer; torch.manual_seed(0); m = Transformer.from_name('stories15M'); "
        "[torch.nn.init.normal_(p, std=0.02) for p in m.parameters()]; "
        f"torch.save(m.state_dict(), {str(ckpt / 'model.pth')!r})"
    )
    subprocess.run([sys.executable, "-c", make], cwd=folder, check=True)
    ranks = [bytes([b]) for b in range(256)] + [f"t{i}".encode() for i in range(GPT_FAST["vocab"] - 256 - 256)]
    lines = (f"{base64.b64encode(t).decode()} {r}" for r, t in enumerate(ranks))
    (ckpt / "tokenizer.model").write_text("\n".join(lines) + "\n")
    argv = [sys.executable, "generate.py", "--checkpoint_path", str(ckpt / "model.pth"), "--prompt", str(PROMPT)]
    argv += ["--num_samples", str(SAMPLES), "--max_new_tokens", str(NEW), "--device", device]
    return folder, argv + (["--compile"] if compile_ else [])


def _gpt_fast_flops(tokens: int, cache: int) -> float:
    """One forward over ``tokens`` new tokens with a KV cache of ``cache`` positions, from the shapes: 2 FLOPs per
    weight per token (wqkv, wo, the three FFN matrices, the output), and attention over the whole cache (gpt-fast
    masks it: q·kᵀ and p·v, 2·2·dim·cache per token per layer)."""
    L, d, f, v = GPT_FAST["n_layer"], GPT_FAST["dim"], GPT_FAST["intermediate"], GPT_FAST["vocab"]
    weights = L * (3 * d * d + d * d + 3 * d * f) + d * v
    return tokens * (2 * weights + L * 4 * d * cache)


def _own_sample_times(log: Path | str, new: int = NEW) -> list[float]:
    """gpt-fast's own time for each sample it reports, in its first run in ``log`` (a file: nsightflow's timed run;
    or its output as text): its ``Time for inference i: ... tokens/sec`` lines, the seconds taken from the tokens per
    second (printed to 0.01, where the seconds are printed to 0.01 s) for ``new`` tokens a sample."""
    text = log.read_text() if isinstance(log, Path) else log
    times = []
    for line in text.splitlines():
        if line.startswith("Average tokens/sec"):
            break
        m = re.match(r"Time for inference \d+: [\d.]+ sec total, ([\d.]+) tokens/sec", line)
        if m:
            times.append(new / float(m.group(1)))
    return times


def _own_clock(argv: list[str], folder: Path, record: Path) -> dict[str, Any]:
    """gpt-fast's own time per decode step, with no profiler in the process: its ``generate()`` timed as its ``main()``
    times it, for NEW and LONG new tokens in turns in one process (tests/programs/gpt_fast_own_step.py), each round's
    difference of the two times over the LONG - NEW extra steps (its set-up, prefill and copies, the same at both
    lengths, cancel), their median: ``step_s``; and the median period of its decode steps, one call of its step function
    to the next, by the script's own clock: ``period_s`` (the host's pace of issuing steps). In the same process, in
    rounds taking turns with those, nsightflow's hook in its timed mode follows generate.py's ranges: ``hooked`` gives
    gpt-fast's own step then and nsightflow's steady decode pace from the hook's record (``pace_s``). One process for
    all: two processes' paces differ by more than the 5% the pace is held to (docs/gpu-host.md)."""
    at = argv.index
    cmd = [sys.executable, str(Path(__file__).parent / "programs" / "gpt_fast_own_step.py")]
    cmd += ["--checkpoint_path", argv[at("--checkpoint_path") + 1], "--prompt", argv[at("--prompt") + 1]]
    device = argv[at("--device") + 1]
    cmd += ["--new", str(NEW), "--long", str(LONG), "--rounds", str(OWN_ROUNDS[device]), "--device", device]
    cmd += ["--hook", str(record)] + (["--compile"] if "--compile" in argv else [])
    # the hook as it is, with no step clocked on the GPU (its Python alone), and with every step clocked, in turns
    cmd += ["--every", f"{step_clock.EVERY},0,1"]
    out = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=True, timeout=900).stdout
    got = json.loads(out.strip().splitlines()[-1])
    plain = got["step_s"]
    for name, times in (
        ("plain", got),
        *(
            (f"under the timed hook, {f'1 step in {k}' if k != '0' else 'no step'} clocked", v)
            for k, v in got["every"].items()
        ),
    ):
        new, long = ([round(x * 1e3, 3) for x in times[k]] for k in ("new", "long"))
        print(f"gpt-fast in one process, {name}, {NEW} and {LONG} new tokens in turns: {new} and {long} ms")
        if times is not got:
            mine, pace, period = times["step_s"], times["pace_s"], times["period_s"]
            print(f"gpt-fast's own decode step in that process: plain {plain * 1e3:.4f} ms, under the hook "
                  f"{mine * 1e3:.4f} ms ({mine / plain - 1:+.2%}); nsightflow's steady decode pace there "
                  f"{pace * 1e3:.4f} ms ({pace / plain - 1:+.2%} of the plain step)")  # fmt: skip
            own = got["period_s"]
            print(f"  its decode steps' median period: plain {own * 1e3:.4f} ms, under the hook {period * 1e3:.4f} ms "
                  f"({period / own - 1:+.2%}); nsightflow's pace against the plain period {pace / own - 1:+.2%}, "
                  f"against the hooked rounds' own {pace / period - 1:+.2%}")  # fmt: skip
    return got


def _check_gpt_fast(run: Path, compiled: bool, log: str) -> float:
    """Each stage's FLOPs per step against the shapes'; returns nsightflow's walls of the steady samples (each one's
    prefill and decode steps) over gpt-fast's own time for them, which also holds what it times outside the ranges
    (its KV-cache set-up, the output's copy)."""
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert set(stages.index) == {"prefill", "decode"}, stages.index.tolist()
    counts = json.loads((run / "analytic_flops.json").read_text())["stages"]
    runs = SAMPLES + (1 if compiled else 0)  # gpt-fast's --compile runs one more sample first, to compile
    prefills = steady_steps(run, "prefill", runs)
    decodes = steady_steps(run, "decode", runs * (NEW - 1))
    cache = PROMPT + NEW
    for stage, steps, tokens in (("prefill", prefills, PROMPT), ("decode", decodes, 1)):
        got, want = counts[stage]["flops"] / steps, _gpt_fast_flops(tokens, cache)
        print(f"gpt-fast {stage}: FLOPs per step {got:.6g} vs the shapes' {want:.6g} ({got / want - 1:+.3%})")
        assert abs(got / want - 1) < 0.01
    manifest = json.loads((run / "manifest.json").read_text())
    every, apart = manifest["every_wall_s"], {(w["stage"], w["step"]) for w in manifest["warmup_steps"]}
    own = _own_sample_times(run / "logs" / log)
    assert len(own) == SAMPLES
    ours, theirs = [], []
    for k, t in enumerate(own, start=runs - SAMPLES):  # gpt-fast does not report its compiling sample
        steps = [("prefill", k)] + [("decode", k * (NEW - 1) + j) for j in range(NEW - 1)]
        if not apart.intersection(steps):
            ours.append(sum(every[stage][step] for stage, step in steps))
            theirs.append(t)
    assert ours, f"every sample has a step set apart: {manifest['warmup_steps']}"
    ratio = sum(ours) / sum(theirs)
    print(f"gpt-fast steady samples: nsightflow's prefill and decode walls {[round(x * 1e3, 3) for x in ours]} ms, "
          f"gpt-fast's own {[round(x * 1e3, 3) for x in theirs]} ms ({ratio - 1:+.2%}); decode per step "
          f"{statistics.median(manifest['program_wall_s']['decode']) * 1e3:.4f} ms")  # fmt: skip
    return ratio


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
def test_gpt_fast_with_its_ranges_on_a_cpu(tmp_path, compiled):
    folder, argv = _gpt_fast(tmp_path, "cpu", compiled)
    work = _workflow(tmp_path, {"name": "gptfast", "command": argv, "cwd": str(folder)}, "torch")
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "gptfast"
    assert OWN_CLOCK[0] < _check_gpt_fast(run, compiled, "torch_profile.log") < OWN_CLOCK[1]
    if not compiled:  # the GPU test's reference program runs here too; its pace is only compared on the GPU host
        own = _own_clock(argv, folder, tmp_path / "own-hooked.json")  # (a loaded CPU's pace changes a lot)
        pace = pd.read_csv(run / "stages.csv").set_index("stage").loc["decode", "pace_ms"] / 1e3
        step = own["step_s"]
        print(f"gpt-fast decode per step: nsightflow's pace {pace * 1e3:.3f} ms, its own clock {step * 1e3:.3f} ms")
        assert own["step_s"] > 0 and own["hooked"]["step_s"] > 0 and own["hooked"]["pace_s"] > 0
        # every decode step's period: the LONG and NEW steps of every plain round but each run's first
        assert 0 < own["period_s"] < own["new"][0] and 0 < own["hooked"]["period_s"]


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
def test_gpt_fast_with_its_ranges_under_nsys_and_ncu(tmp_path, compiled):
    folder, argv = _gpt_fast(tmp_path, "cuda", compiled)
    work = _workflow(tmp_path, {"name": "gptfast", "command": argv, "cwd": str(folder)}, "nsight")
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "gptfast"
    ratio = _check_gpt_fast(run, compiled, "timeline.log")
    _ncu_started_once(run)
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    print(stages[["range_instances", "wall_ms", "gpu_busy_ms", "flops_analytic", "flops_tensor_measured"]].to_string())
    manifest = json.loads((run / "manifest.json").read_text())
    wall, pace = statistics.median(manifest["program_wall_s"]["decode"]), stages.loc["decode", "pace_ms"] / 1e3
    # (its pace against gpt-fast's own step is held in one process: test_gpt_fast_compiled_keeps_its_pace_...)
    print(f"gpt-fast decode per step: the workflow's steady pace {pace * 1e3:.4f} ms (range wall {wall * 1e3:.4f} ms)")
    if compiled:
        _measured_compiled(run, argv, folder, tmp_path)
    assert OWN_CLOCK[0] < ratio < OWN_CLOCK[1]


def _pace_in_one_process(clock: dict[str, Any]) -> None:
    """nsightflow's pace, found from the timed hook's record as the workflow finds it, against the program's own step
    with nothing of nsightflow in it, both in one process (the hook's cost and its clock's error together); and the
    sampled step clock's steady decode steps (nsightflow.capture.inside.step_clock.Sampler) against every step
    clocked on the GPU, from the same rounds' ranges: their mean pace and their walls' sum (the GPU's time between two
    clocked steps is shared among the steps between, so a stretch's total is kept and its spread smoothed: the median
    pace is printed)."""
    full = clock["every"]["1"]
    print(f"the host: {clock['host']}")
    for what in ("pace_s", "mean_pace_s", "wall_s"):
        got, want = full["sampled"][what], full[what]
        print(f"steady decode {what[:-2]}: sampled {got * 1e3:.4f} ms, every step clocked {want * 1e3:.4f} ms "
              f"({got / want - 1:+.2%})")  # fmt: skip
        assert what == "pace_s" or abs(got / want - 1) < SAMPLED
    # the program's own step, its GPU's work included: its plain rounds' synchronized times (each round's two runs
    # within a second of each other). Not the host's period between two calls of its step function: on an H200 host
    # that issued CUDA-graph replays faster than the GPU ran them, the period was 0.187 to 0.202 ms where each step
    # took 0.229 to 0.231 ms (docs/benchmarks.md, 2026-12-01).
    assert abs(clock["hooked"]["pace_s"] / clock["step_s"] - 1) < OWN_STEP


@pytest.mark.gpu
def test_gpt_fast_compiled_keeps_its_pace_under_the_timed_hook(tmp_path):
    """gpt-fast ``--compile``'s decode step (a CUDA-graph replay, host-bound: every microsecond of the hook's is in
    its pace) timed by its own clock with and without nsightflow's timed hook in one process, and nsightflow's steady
    decode pace from the hook's record within 5% of the plain step (the program's own synchronized time per step):
    the part of the corpus test above that needs no profiler, on its own (two minutes against that test's fifteen)."""
    folder, argv = _gpt_fast(tmp_path, "cuda", True)
    _pace_in_one_process(_own_clock(argv, folder, tmp_path / "own-hooked.json"))


def _measured_compiled(run: Path, argv: list[str], folder: Path, tmp_path: Path) -> None:
    """Measured compiled: each steady decode step launches the kernels, by name and count, of a plain `nsys profile`
    of the same command (its CUDA-graph replays and Triton kernels); ncu's capture ran the kernels the timeline saw
    (the workflow compares its launches with the plan's: nsightflow.capture.inside.hook_tuning keeps autotuning's
    choices), and its numbers are those of ncu over every launch."""
    manifest = json.loads((run / "manifest.json").read_text())
    apart = {w["step"] for w in manifest["warmup_steps"] if w["stage"] == "decode"}
    print(f"set apart: {manifest['warmup_steps']}; autotuning choices taken: {len(manifest['autotuning'])}")
    plain = kernels_per_range(plain_nsys(argv, tmp_path / "plain", folder), "LLM", "decode")
    _plain_times(manifest, plain, tmp_path / "plain.log", run / "logs" / "timeline.log")
    mine = sql_launches(run / "timeline" / "timeline.sqlite")
    mine = mine[mine["stage"] == "decode"]
    assert len(plain) == len(manifest["every_wall_s"]["decode"])
    for step in sorted(set(range(len(plain))) - apart):
        ours, theirs = mine[mine["step"] == step], plain[step]
        assert Counter(ours["kernel"]) == Counter(theirs["kernel"]), f"decode step {step}"
        assert ours["graph"].sum() == theirs["graph"].sum() > 0  # CUDA-graph replays in both
    assert mine["kernel"].str.startswith("triton_").any()
    _against_every_launch(run, argv, folder, tmp_path / "full", manifest["autotuning"])


def _plain_times(manifest: dict, plain: list[pd.DataFrame], log: Path, timed_log: Path) -> None:
    """Print how the program times when nsightflow is not in it (a plain nsys run): gpt-fast's own time per sample
    against the timed run's, and each steady decode step on the GPU (the first kernel's start to the next step's
    first, within a sample) against nsightflow's steady decode pace."""
    theirs, timed = _own_sample_times(log), _own_sample_times(timed_log)
    print(f"gpt-fast's own time per sample: plain nsys run {[round(x * 1e3, 3) for x in theirs]} ms, "
          f"nsightflow's timed run {[round(x * 1e3, 3) for x in timed]} ms")  # fmt: skip
    starts = [float(r["start"].min()) for r in plain]
    per = NEW - 1
    periods = [(starts[i + 1] - starts[i]) / 1e9 for i in range(per, len(starts) - 1) if (i + 1) % per]
    apart = {w["step"] for w in manifest["warmup_steps"] if w["stage"] == "decode"}
    paces = [p for i, p in enumerate(manifest["every_pace_s"]["decode"]) if p is not None and i not in apart]
    ours, theirs_step = statistics.median(paces), statistics.median(periods)
    print(f"decode per step on the GPU in the plain run (median of {len(periods)}): {theirs_step * 1e3:.4f} ms; "
          f"nsightflow's steady decode pace {ours * 1e3:.4f} ms ({ours / theirs_step - 1:+.2%})")  # fmt: skip


def _against_every_launch(run: Path, argv: list[str], folder: Path, base: Path, tuning: dict) -> None:
    """Each stage's measured tensor FLOPs and DRAM bytes per steady step against ncu over every launch of the last
    sample's ranges (its prefill and decode steps) in one run of the same command: the program alone under ncu, taking
    the timed run's autotuning choices (ncu's own timing would pick other kernels), with the capture's own metric list
    (which counters share a replay pass changes what DRAM bytes a pass sees). The launches before that sample are
    skipped but the last GUARD, counted from the user's ranges in nsightflow's timeline (ncu's SASS counters cost about
    0.3 s a launch); ncu profiles to the program's end, and the last sample is the capture's last launches: a run under
    ncu that launches a few kernels more or fewer in the ranges before it (a CUDA graph recorded again) does not shift
    it (on four H200s a reference of a fixed launch count once began before the sample). Each of the reference's steps
    is checked kernel by kernel against the timeline's."""
    cmd = json.loads((run / "ncu" / "capture.cmd.json").read_text())["argv"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    sqlite = run / "timeline" / "timeline.sqlite"
    ranges = {st: kernels_per_range(sqlite, "LLM", st) for st in STAGES}
    steps = [ranges["prefill"][-1]] + ranges["decode"][-(NEW - 1) :]  # the last sample's, in order
    names = ["prefill"] + ["decode"] * (NEW - 1)
    count = sum(len(r) for r in steps)
    skip = sum(len(r) for st in STAGES for r in ranges[st]) - count
    ncu_bin = shutil.which("ncu") or "ncu"
    ref = ncu.reference_argv(ncu_bin, base, "LLM", list(STAGES), metrics, argv)
    start = max(0, skip - GUARD)
    ref = ref[: -len(argv)] + ["--launch-skip", str(start)] + argv
    env = tuned_env(base.parent / "tuned-site", tuning)
    began = time.monotonic()
    with open(f"{base}.log", "w") as log:  # a bound, so that a slow reference fails here with its log named
        subprocess.run(ref, check=True, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=REFERENCE_S)
    export = [ncu_bin, "--import", f"{base}.ncu-rep", "--page", "raw", "--csv", "--print-units", "base"]
    every, _ = ncu_csv.parse_raw_csv(subprocess.run(export, capture_output=True, text=True, check=True).stdout)
    every = every.sort_values("ID", key=lambda ids: ids.astype(int)).reset_index(drop=True)
    more = len(every) - (skip - start) - count  # launches in the ranges before the last sample, under ncu less timeline
    print(f"ncu over the {len(every)} launches in the ranges after {start} ({time.monotonic() - began:.0f} s): the "
          f"last sample's {count} at their end; under ncu the program launched {more:+d} kernels in its ranges before "
          f"that sample against the timeline")  # fmt: skip
    assert len(every) >= count, f"the reference holds {len(every)} launches, fewer than the last sample's {count}"
    tail = every.iloc[-count:].reset_index(drop=True)
    stage, at = [], 0
    for st, step in zip(names, steps, strict=True):  # the reference's steps, kernel by kernel the timeline's
        block = tail["Kernel Name"].iloc[at : at + len(step)]
        assert Counter(map(name_key, block)) == Counter(map(name_key, step["kernel"])), f"{st} at row {at}"
        stage += [st] * len(block)
        at += len(block)
    stage = np.array(stage)
    tensor = [c for c in tail.columns if c.startswith("sm__ops_path_tensor_src_") and c.endswith(".sum")]
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    for st in STAGES:
        rows = tail[stage == st]
        steady = int(stages.loc[st, "range_instances"])
        n = names.count(st)
        want_t = float(rows[tensor].to_numpy(dtype=float).sum()) / n
        want_d = float((rows["dram__bytes_read.sum"] + rows["dram__bytes_write.sum"]).sum()) / n
        got_t = stages.loc[st, "flops_tensor_measured"] / steady
        got_d = stages.loc[st, "dram_bytes_measured"] / steady
        print(f"gpt-fast --compile {st}, per steady step ({steady} steps; the reference's {n}): tensor "
              f"FLOPs {got_t:.6g} vs ncu over every launch {want_t:.6g} ({got_t / want_t - 1:+.3%}); DRAM "
              f"{got_d:.6g} vs {want_d:.6g} ({got_d / want_d - 1:+.3%})")  # fmt: skip
        assert abs(got_t / want_t - 1) < 0.01 and abs(got_d / want_d - 1) < 0.01
