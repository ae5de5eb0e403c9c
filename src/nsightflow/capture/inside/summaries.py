"""Built-in step summaries (config ``step_inputs``) for serving engines nsightflow knows, run inside the program
before each step: what the step batches, in the names nsightflow.analysis.steps classes a batch mix by (``requests``,
``prefill_tokens``, ``decode_tokens``, ``kv_tokens``). Each reads the engine's own state and changes nothing."""

from __future__ import annotations

from typing import Any


def transformers_batch(processor: Any, *_: Any, **__: Any) -> dict[str, float]:
    """transformers' continuous batching (``ContinuousBatchProcessor._generation_step``, transformers 5): the batch
    the scheduler prepared for this step. A request's query is (a chunk of) its prompt where it is longer than one
    token or has nothing before it (a one-token prompt), else one token it decodes; ``kv_tokens``: the positions its
    attention reads (its past and its query), summed over the requests."""
    requests = processor.inputs_and_outputs.requests_in_batch
    spans = [(int(r.query_length), int(r.state.position_offset)) for r in requests]  # the offset counts the query
    prefill = [n for n, offset in spans if n > 1 or offset == n]
    return {
        "requests": len(requests),
        "prefill_tokens": sum(prefill),
        "decode_tokens": len(spans) - len(prefill),
        "kv_tokens": sum(offset for _, offset in spans),
    }


def vllm_batch(runner: Any, scheduler_output: Any, *_: Any, **__: Any) -> dict[str, float]:
    """vLLM's V1 engine (``GPUModelRunner.execute_model`` of either model runner, called with the scheduler's
    ``SchedulerOutput``): the batch its scheduler made for this forward. A request decodes where it has output
    tokens already and is given one token (plus its speculative ones); otherwise its tokens are (a chunk of) its
    prompt, or its prompt and outputs computed again after a preemption. ``kv_tokens``: the positions its attention
    reads (those computed before this step and its own), summed over the requests."""
    out = scheduler_output
    cached = out.scheduled_cached_reqs
    computed = {r.req_id: int(r.num_computed_tokens) for r in out.scheduled_new_reqs}
    computed.update(zip(cached.req_ids, map(int, cached.num_computed_tokens), strict=True))
    outputs = dict(zip(cached.req_ids, map(int, cached.num_output_tokens), strict=True))
    spec = out.scheduled_spec_decode_tokens
    prefill = decode = kv = 0
    for req, tokens in out.num_scheduled_tokens.items():
        kv += computed[req] + tokens
        if outputs.get(req, 0) > 0 and tokens == 1 + len(spec.get(req, ())):
            decode += tokens
        else:
            prefill += tokens
    return {
        "requests": len(out.num_scheduled_tokens),
        "prefill_tokens": prefill,
        "decode_tokens": decode,
        "kv_tokens": kv,
    }
