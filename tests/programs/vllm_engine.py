"""vLLM's scheduler (vLLM 0.33, Apache-2.0: its wheel from PyPI, imported on a CPU) serving requests, with a stand-in
for its model runner: the forward of each scheduled batch is a small stack of matrices over the batch's tokens, and a
request whose prompt is all computed samples one token. The batches are the scheduler's own, as its engine core
hands them to the model runner's ``execute_model``. Used by tests/test_engines.py, in process and as a command
(tests/programs/vllm_serve.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

BLOCK = 16
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128}
LLAMA |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}
LLAMA |= {"max_position_embeddings": 512, "torch_dtype": "float16"}


def scheduler(folder: Path, blocks: int, max_tokens: int) -> Any:
    """vLLM's scheduler as its engine core builds it, for a small Llama config written to ``folder`` (no weights:
    the scheduler reads only the config), chunked prefill of at most ``max_tokens`` a step, and a KV cache of
    ``blocks`` blocks."""
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    sched = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=max_tokens,
        max_model_len=256,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    config = VllmConfig(
        scheduler_config=sched,
        model_config=ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float16", seed=0),
        cache_config=CacheConfig(block_size=BLOCK),
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.num_gpu_blocks = blocks
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    return Scheduler(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
    )


class Runner:
    """The model runner's stand-in: ``execute_model(scheduler_output)`` as vLLM's runners are called. Its forward
    multiplies the batch's tokens through ``layers`` square matrices of the config's hidden size and each request's
    last token through a hidden x vocabulary head: 2 * (tokens * layers * hidden^2 + requests * hidden * vocab)
    FLOPs."""

    def __init__(self, scheduler: Any, layers: int = 2) -> None:
        hidden, vocab = LLAMA["hidden_size"], LLAMA["vocab_size"]
        g = torch.Generator().manual_seed(0)
        self.scheduler = scheduler
        self.embed = torch.randn(vocab, hidden, generator=g) * 0.02
        self.layers = [torch.randn(hidden, hidden, generator=g) * 0.02 for _ in range(layers)]
        self.head = torch.randn(hidden, vocab, generator=g) * 0.02

    def execute_model(self, scheduler_output: Any) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(scheduler_output.num_scheduled_tokens)
        counts = [scheduler_output.num_scheduled_tokens[i] for i in ids]
        x = self.embed[torch.zeros(sum(counts), dtype=torch.long)]
        for w in self.layers:
            x = torch.relu(x @ w)
        last = torch.tensor(counts).cumsum(0) - 1
        token = int((x[last] @ self.head).argmax(-1)[0]) if ids else 0
        states = [self.scheduler.requests[i] for i in ids]
        done = [r.num_computed_tokens >= r.num_prompt_tokens for r in states]
        out = ModelRunnerOutput(req_ids=ids, req_id_to_index={i: k for k, i in enumerate(ids)})
        out.sampled_token_ids = [[token] if d else [] for d in done]
        return out


def requests(lengths: list[tuple[int, int]]) -> list[Any]:
    """vLLM requests of (prompt, output) lengths, never ending early."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    return [
        Request(str(i), [1 + i] * p, SamplingParams(max_tokens=k, ignore_eos=True), None)
        for i, (p, k) in enumerate(lengths)
    ]


def serve(scheduler: Any, runner: Any, reqs: list[Any], before_forward: Any = None) -> int:
    """The engine core's loop without async scheduling: schedule, run the batch, update; a step with nothing
    scheduled runs no forward. ``before_forward(out, states)`` sees each batch and the requests' (computed tokens,
    outputs) before the scheduler ran. Returns the computed tokens preemptions threw away."""
    from vllm.v1.outputs import ModelRunnerOutput

    for r in reqs:
        scheduler.add_request(r)
    lost = 0
    while scheduler.has_requests():
        states = {r.request_id: (r.num_computed_tokens, len(r.output_token_ids)) for r in reqs}
        out = scheduler.schedule()
        lost += sum(c for r in reqs if r.num_computed_tokens < (c := states[r.request_id][0]))
        if not out.num_scheduled_tokens:
            scheduler.update_from_output(out, ModelRunnerOutput(req_ids=[], req_id_to_index={}))
            continue
        if before_forward is not None:
            before_forward(out, states)
        scheduler.update_from_output(out, runner.execute_model(out))
    return lost
