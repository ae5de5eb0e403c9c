"""Serving engines nsightflow does not ship, as far as a CPU runs them: vLLM's own scheduler makes the batches its
model runner's ``execute_model`` is given (the step function the README names), and the built-in summary
(nsightflow.capture.inside.summaries:vllm_batch) reads them; the step functions the README names resolve in vLLM's
source.

The engines tier: skipped unless vLLM is importable (``NSIGHTFLOW_REQUIRE=engines`` makes that an error). vLLM's
wheel is built for CUDA; its scheduler and configs are Python and import on a CPU with ``pip install --no-deps
vllm==0.33.0`` and the pure-Python packages its modules import (the README's test section lists them).
"""

from __future__ import annotations

import inspect
import json
import random
import sys
from pathlib import Path

import pytest

from nsightflow.capture.inside.hook_steps import StepInputs

pytestmark = pytest.mark.engines

VLLM_SUMMARY = "nsightflow.capture.inside.summaries:vllm_batch"
# The step functions README.md names for vLLM: each model runner's forward of one scheduled batch.
VLLM_STEPS = [
    "vllm.v1.worker.gpu.model_runner:GPUModelRunner.execute_model",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.execute_model",
]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def _engine():
    """tests/programs/vllm_engine.py, loaded from its file (the programs' folder stays off this process's path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_engine", PROGRAMS / "vllm_engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIXED = [(8 + 32 * i % 33, 2 + i % 5) for i in range(6)]  # prompts of 8 to 40 tokens, outputs of 2 to 6


def _serve(tmp_path: Path, lengths: list[tuple[int, int]], blocks: int) -> tuple[list, list[dict[str, float]], int]:
    """Serve requests of (prompt, output) lengths through vLLM's scheduler, 64 tokens a step, with a stand-in model
    runner (tests/programs/vllm_engine.py); each batch summarised by nsightflow's step inputs (as the timed run
    does), and the same read from vLLM's request objects before and after the scheduler ran; and the computed
    tokens preemptions threw away (to be computed again)."""
    vllm_engine = _engine()
    scheduler = vllm_engine.scheduler(tmp_path / "model", blocks, 64)
    reqs = vllm_engine.requests(lengths)
    inputs = StepInputs({"forward": VLLM_SUMMARY})
    expected = []

    def before_forward(out, states):
        inputs.summarise("forward", (object(), out), {})
        step = {"requests": 0, "prefill_tokens": 0, "decode_tokens": 0, "kv_tokens": 0}
        for r in reqs:
            if r.request_id in out.num_scheduled_tokens:
                computed, outputs = states[r.request_id]
                n = r.num_computed_tokens - computed  # what vLLM's request says it was given (from 0 once preempted)
                step["requests"] += 1
                step["kv_tokens"] += r.num_computed_tokens
                step["decode_tokens" if outputs and n == 1 else "prefill_tokens"] += n
        expected.append(step)

    lost = vllm_engine.serve(scheduler, vllm_engine.Runner(scheduler), reqs, before_forward)
    assert not inputs.errors, inputs.errors
    return inputs.steps["forward"], expected, lost


def test_vllm_batches_its_scheduler_makes_are_summarised_as_they_are(tmp_path):
    """Prompts of 8 to 40 tokens over a 64-token step: prompts chunked, prefill sharing steps with decodes; every
    step's requests, prefill and decode tokens and KV positions as vLLM's requests say, and over the run the prompts'
    and outputs' tokens of the request set."""
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    lengths = MIXED
    got, expected, lost = _serve(tmp_path, lengths, blocks=1000)
    print("vLLM steps:", got)
    assert got == expected and lost == 0
    assert sum(s["prefill_tokens"] for s in got) == sum(p for p, _ in lengths)
    assert sum(s["decode_tokens"] for s in got) == sum(k - 1 for _, k in lengths)
    assert any(s["prefill_tokens"] and s["decode_tokens"] for s in got), "no step mixed prefill and decodes"


def test_vllm_batches_after_preemptions_count_the_tokens_computed_again(tmp_path):
    """A KV cache of 8 blocks for six requests of 20 to 40 prompt and output tokens: vLLM preempts requests and
    computes their prompts and outputs again later, in steps the summary calls prefill (a resumed request's first
    new token comes out of such a step); every step as vLLM's requests say, and over the run the request set's
    tokens plus those the preemptions threw away."""
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    rng = random.Random(1)
    lengths = [(rng.randint(20, 40), rng.randint(20, 40)) for _ in range(6)]
    got, expected, lost = _serve(tmp_path, lengths, blocks=8)
    print(f"vLLM with preemptions: {len(got)} steps, {lost} computed tokens thrown away")
    assert got == expected and lost > 0
    total = sum(s["prefill_tokens"] + s["decode_tokens"] for s in got)
    assert total == sum(p + k - 1 for p, k in lengths) + lost


def test_the_readme_vllm_step_functions_are_forwards_of_a_scheduled_batch():
    """Each function the README names is in vLLM's source (its module imported, each part of its name an attribute,
    as the hook looks it up), and takes the scheduler's output first, which the built-in summary reads."""
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    import functools
    import importlib

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for where in VLLM_STEPS:
        assert f"`{where}`" in readme, f"README.md no longer names {where}"
        module, _, qualname = where.partition(":")
        fn = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
        params = list(inspect.signature(fn).parameters)
        assert params[:2] == ["self", "scheduler_output"], (where, params)


def test_vllm_batches_through_the_workflow_are_its_steps_and_mixes(tmp_path):
    """vLLM's scheduler as a command (tests/programs/vllm_serve.py), its runner's ``execute_model`` the steps and
    ``vllm_batch`` their inputs, on the CPU under torch.profiler: each step's batch in steps.csv as vLLM's requests
    say (the same scheduler run in this process), its mix from that batch, and its model FLOPs those of the
    stand-in's matrices over the batch's tokens and requests."""
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    import pandas as pd
    from conftest import snakemake, torch_workflow

    vllm_engine = _engine()
    _, expected, _ = _serve(tmp_path / "here", MIXED, blocks=1000)
    argv = [sys.executable, str(PROGRAMS / "vllm_serve.py"), "--lengths", json.dumps(MIXED)]
    workload = {"name": "vllm", "command": argv, "warmup_steps": 0}
    workload |= {"step_functions": {"forward": "vllm_engine:Runner.execute_model"}}
    workload |= {"step_inputs": {"forward": VLLM_SUMMARY}}
    work = torch_workflow(tmp_path, [workload])
    snakemake(work, "--cores", "1", "results/report.html")
    steps = pd.read_csv(work / "results" / "vllm" / "steps.csv")
    print(steps[["step", "inputs", "mix", "flops_model"]].to_string())
    assert list(steps["inputs"]) == [", ".join(f"{k}={v}" for k, v in e.items()) for e in expected]
    h, layers, v = vllm_engine.LLAMA["hidden_size"], 2, vllm_engine.LLAMA["vocab_size"]
    tokens = [e["prefill_tokens"] + e["decode_tokens"] for e in expected]
    flops = [2 * (n * layers * h * h + e["requests"] * h * v) for n, e in zip(tokens, expected, strict=True)]
    assert list(steps["flops_model"]) == flops
    # the README's mixes: decode-only by batch size, prefill-only, prefill-heavy (more prompt tokens than decoded)
    mixes = [
        f"decode-only, batch {e['decode_tokens']}"
        if not e["prefill_tokens"]
        else "prefill-only"
        if not e["decode_tokens"]
        else "prefill-heavy"
        if e["prefill_tokens"] > e["decode_tokens"]
        else "mixed"
        for e in expected
    ]
    assert list(steps["mix"]) == mixes and "prefill-heavy" in mixes
