"""Built-in step summaries (config ``step_inputs``) for serving engines nsightflow knows, run inside the program
before each step: what the step batches, in the names nsightflow.analysis.steps classes a batch mix by (``requests``,
``prefill_tokens``, ``decode_tokens``, ``kv_tokens``). Each reads the engine's own state and changes nothing."""

from __future__ import annotations

from typing import Any


def transformers_batch(processor: Any, *_: Any, **__: Any) -> dict[str, float]:
    """transformers' continuous batching (``ContinuousBatchProcessor._generation_step``, transformers 5): the batch
    the scheduler prepared for this step. A request whose query is one token decodes; a longer query is (a chunk of)
    its prompt; ``kv_tokens``: the positions its attention reads, summed over the requests."""
    requests = processor.inputs_and_outputs.requests_in_batch
    lengths = [int(r.query_length) for r in requests]
    return {
        "requests": len(requests),
        "prefill_tokens": sum(n for n in lengths if n > 1),
        "decode_tokens": sum(1 for n in lengths if n == 1),
        "kv_tokens": sum(int(r.state.position_offset) for r in requests),
    }
