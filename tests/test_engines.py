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
BLOCK = 16


def _scheduler(tmp_path: Path, blocks: int, max_tokens: int):
    """vLLM's scheduler as its engine core builds it, for a small Llama-shaped config (no weights: the scheduler
    reads only the config), chunked prefill of at most ``max_tokens`` a step, and a KV cache of ``blocks`` blocks."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = tmp_path / "model"
    model.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}
    config |= {"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    config |= {"vocab_size": 512, "max_position_embeddings": 512, "torch_dtype": "float16"}
    (model / "config.json").write_text(json.dumps(config))
    sched = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=max_tokens,
        max_model_len=256,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    vllm_config = VllmConfig(
        scheduler_config=sched,
        model_config=ModelConfig(model=str(model), skip_tokenizer_init=True, dtype="float16", seed=0),
        cache_config=CacheConfig(block_size=BLOCK),
        device_config=DeviceConfig(device="cpu"),
    )
    vllm_config.cache_config.num_gpu_blocks = blocks
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK,
    )


def _serve(scheduler, lengths: list[tuple[int, int]]) -> tuple[list, list[dict[str, float]], int]:
    """Serve requests of (prompt, output) lengths through vLLM's scheduler, its model runner replaced by a token
    sampled for each request whose prompt is all computed; each step's batch summarised by nsightflow's step inputs
    (as the timed run does), the same read from vLLM's request objects before and after the scheduler ran, and the
    computed tokens preemptions threw away (to be computed again)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    requests = [
        Request(str(i), [1 + i] * p, SamplingParams(max_tokens=k, ignore_eos=True), None)
        for i, (p, k) in enumerate(lengths)
    ]
    for r in requests:
        scheduler.add_request(r)
    inputs = StepInputs({"forward": VLLM_SUMMARY})
    expected, lost = [], 0
    while scheduler.has_requests():
        before = {r.request_id: (r.num_computed_tokens, len(r.output_token_ids)) for r in requests}
        out = scheduler.schedule()
        lost += sum(c for r in requests if r.num_computed_tokens < (c := before[r.request_id][0]))
        if not out.num_scheduled_tokens:
            scheduler.update_from_output(out, ModelRunnerOutput(req_ids=[], req_id_to_index={}))
            continue  # the engine core does not run the model for an empty step
        inputs.summarise("forward", (object(), out), {})
        step = {"requests": 0, "prefill_tokens": 0, "decode_tokens": 0, "kv_tokens": 0}
        for r in requests:
            computed, outputs = before[r.request_id]
            if r.request_id not in out.num_scheduled_tokens:
                continue
            n = r.num_computed_tokens - computed  # what vLLM's request says it was given (from 0 once preempted)
            step["requests"] += 1
            step["kv_tokens"] += r.num_computed_tokens
            step["decode_tokens" if outputs and n == 1 else "prefill_tokens"] += n
        expected.append(step)
        ids = list(out.num_scheduled_tokens)
        by_id = {r.request_id: r for r in requests}
        sampled = [[7] if by_id[i].num_computed_tokens >= by_id[i].num_prompt_tokens else [] for i in ids]
        runner = ModelRunnerOutput(req_ids=ids, req_id_to_index={i: k for k, i in enumerate(ids)})
        runner.sampled_token_ids = sampled
        scheduler.update_from_output(out, runner)
    assert not inputs.errors, inputs.errors
    return inputs.steps["forward"], expected, lost


def test_vllm_batches_its_scheduler_makes_are_summarised_as_they_are(tmp_path):
    """Mixed lengths over a 64-token step: prompts chunked, prefill sharing steps with decodes; every step's
    requests, prefill and decode tokens and KV positions as vLLM's requests say, and over the run the prompts' and
    outputs' tokens of the request set."""
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    rng = random.Random(0)
    lengths = [(rng.randint(8, 40), rng.randint(2, 6)) for _ in range(6)]
    got, expected, lost = _serve(_scheduler(tmp_path, blocks=1000, max_tokens=64), lengths)
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
    got, expected, lost = _serve(_scheduler(tmp_path, blocks=8, max_tokens=64), lengths)
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
