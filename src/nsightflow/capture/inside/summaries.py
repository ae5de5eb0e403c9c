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
