"""A serving workload: transformers' continuous batching (a paged KV cache and a scheduler that mixes prefill and
decode in each forward) of a causal LM from a config or a local checkpoint, over a request set of prompt and output
lengths drawn from a seeded distribution, arriving all at once, a few after each of the engine's iterations
(``--per-step``: the same iterations in every run, so prefill of new requests mixes with decode of the others), or at
a rate (by the clock: the iterations then differ from run to run, which nsightflow's several launches of one program
refuse; profile it at once or per step).

It is a program, run as a command (``python -m nsightflow.workloads.serving ...``) so that the engine runs as it does
for a user: its scheduler iterations are the steps (config ``step_functions``: :data:`STEP`), each one's batch read
by :data:`SUMMARY` (config ``step_inputs``). It prints its own clock's numbers, from the engine's request records, as
one line ``nsightflow-metrics: {json}`` (shown on the run page): requests, tokens generated, tokens per second over
the run, and time to first token and per output token (median and 90th percentile) where the engine records them.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STEP = "transformers.generation.continuous_batching.continuous_api:ContinuousBatchProcessor._generation_step"
SUMMARY = "nsightflow.capture.inside.summaries:transformers_batch"
# where the engine drains its queue of new requests before each iteration (arrivals per step are submitted there)
ARRIVE = "transformers.generation.continuous_batching.continuous_api:ContinuousBatchProcessor.prepare_next_batch"
PREFIX = "nsightflow-metrics: "  # nsightflow.capture.read.own_metrics reads the line


def request_set(
    n: int, prompt: int, prompt_spread: int, new: int, new_spread: int, vocab: int, seed: int
) -> list[tuple[list[int], int]]:
    """``n`` requests: prompt token ids and tokens to generate, each length uniform within ``± spread`` of its mean
    (at least 1), seeded."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = max(1, rng.randint(prompt - prompt_spread, prompt + prompt_spread))
        k = max(1, rng.randint(new - new_spread, new + new_spread))
        out.append(([rng.randrange(1, vocab) for _ in range(p)], k))
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def own_clock(outputs: list[Any], began: float, ended: float) -> dict[str, Any]:
    """The engine's own numbers over its request records: tokens per second from the first request's arrival to the
    last token (``served_s``; the records' ``perf_counter`` times, so the engine's warm-up before the first request and
    its teardown after the last token, a thread join and a garbage collection, are left out; where a record has no
    token times, ``ended`` stands for the last token), and per request the time to its first token and per further
    token."""
    tokens = sum(len(o.generated_tokens) for o in outputs)
    first = min((o.created_time for o in outputs), default=began)
    lasts = [o.timestamps[-1] for o in outputs if o.timestamps]
    last = max(lasts) if outputs and len(lasts) == len(outputs) else ended
    said: dict[str, Any] = {"requests": len(outputs), "tokens": tokens, "tokens_per_s": tokens / (last - first)}
    said["served_s"] = last - first
    ttft = [o.timestamps[0] - o.created_time for o in outputs if o.timestamps]
    tpot = [
        (o.timestamps[-1] - o.timestamps[0]) / (len(o.timestamps) - 1) for o in outputs if len(o.timestamps or []) > 1
    ]
    if ttft:
        said |= {"ttft_ms_p50": statistics.median(ttft) * 1e3, "ttft_ms_p90": _percentile(ttft, 0.9) * 1e3}
    if tpot:
        said |= {"tpot_ms_p50": statistics.median(tpot) * 1e3, "tpot_ms_p90": _percentile(tpot, 0.9) * 1e3}
    return said


def serve(
    model: Any,
    requests: list[tuple[list[int], int]],
    rate: float,
    warmup: bool,
    per_step: int = 0,
    max_batch_tokens: int = 0,
) -> list[Any]:
    """Run ``requests`` through the model's continuous-batching manager (as ``generate_batch`` runs it: no gradients,
    the engine's own warm-up where ``warmup``), submitted at once (``rate`` and ``per_step`` 0), ``rate`` a second,
    or ``per_step`` each time the engine prepares an iteration (:func:`arrivals`); their finished records, in
    submission order. ``max_batch_tokens``: the engine's batch limit (0: its own, sized from the GPU's free memory,
    where a second process of the program may find too little left)."""
    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(max_new_tokens=max(k for _, k in requests), do_sample=False, eos_token_id=-1, pad_token_id=0)  # type: ignore[no-untyped-call]
    # a KV cache the requests fit in, not one sized from free memory (on a CPU: gigabytes zeroed before step 0)
    default = ContinuousBatchingConfig()
    named = [k for k in ("page_size", "block_size") if hasattr(default, k)]  # its name in transformers 5.17: block_size
    page = int(getattr(default, named[0]))
    blocks = sum(-(-(len(p) + k) // page) for p, k in requests) + len(requests)
    limits: dict[str, Any] = {"num_blocks": blocks}
    if max_batch_tokens:
        if not hasattr(default, "max_batch_tokens"):
            raise SystemExit("--max-batch-tokens: this transformers' ContinuousBatchingConfig has no max_batch_tokens")
        limits["max_batch_tokens"] = max_batch_tokens
    cb = ContinuousBatchingConfig(**limits)
    ctx = model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb, warmup=warmup)
    with torch.no_grad(), ctx as manager:
        ids: list[str] = []

        def submit(prompt: list[int], new: int) -> None:
            ids.append(manager.add_request(prompt, max_new_tokens=new, record_timestamps=True))

        with arrivals(requests if per_step else [], per_step, submit):
            began = time.perf_counter()
            for i, (prompt, new) in enumerate([] if per_step else requests):
                if rate > 0:
                    time.sleep(max(0.0, began + i / rate - time.perf_counter()))
                submit(prompt, new)
            done: dict[str, Any] = {}
            while len(done) < len(requests):
                result = manager.get_result(timeout=1)
                if result is not None and result.is_finished():
                    done[result.request_id] = result
                elif result is None and not manager.is_running():
                    raise RuntimeError(f"the engine stopped with {len(requests) - len(done)} request(s) unfinished")
    return [done[i] for i in ids]


@contextmanager
def arrivals(
    pending: list[tuple[list[int], int]], per_step: int, submit: Callable[[list[int], int], None]
) -> Iterator[None]:
    """While open, ``per_step`` of the ``pending`` requests are submitted each time the engine prepares an iteration
    (:data:`ARRIVE`, wrapped on its class), from the engine's own thread, just before it drains its queue: iteration k
    holds the first k+1 groups (less those finished), and every run of the program has the same iterations (arrivals
    by the clock do not)."""
    if not pending:
        yield
        return
    module, qualname = ARRIVE.split(":")
    owner, name = qualname.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), owner)
    if name not in cls.__dict__:
        raise SystemExit(f"--per-step: this transformers has no {qualname} to submit requests at; use --rate 0")
    prepare = cls.__dict__[name]
    left = list(pending)

    def prepared(self: Any, *args: Any, **kwargs: Any) -> Any:
        for prompt, new in left[:per_step]:
            submit(prompt, new)
        del left[:per_step]
        return prepare(self, *args, **kwargs)

    setattr(cls, name, functools.wraps(prepare)(prepared))
    try:
        yield
    finally:
        setattr(cls, name, prepare)


def main(argv: list[str] | None = None) -> None:
    from nsightflow.workloads.hf import load_model

    p = argparse.ArgumentParser(prog="python -m nsightflow.workloads.serving", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="the model's config as JSON (model_type and sizes); random weights")
    p.add_argument("--model", help="a local checkpoint directory instead")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens, mean")
    p.add_argument("--prompt-spread", type=int, default=64, help="prompt tokens vary by up to this much")
    p.add_argument("--new", type=int, default=32, help="tokens generated per request, mean")
    p.add_argument("--new-spread", type=int, default=16)
    p.add_argument("--rate", type=float, default=0.0, help="requests a second; 0: all at once")
    p.add_argument("--per-step", type=int, default=0, help="this many requests join before each engine iteration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-warmup", action="store_true", help="skip the engine's own warm-up (CUDA-graph capture)")
    p.add_argument("--max-batch-tokens", type=int, default=0, help="tokens an iteration at most (0: from free memory)")
    a = p.parse_args(argv)
    config = json.loads(a.config) if a.config else None
    model = load_model(a.model, config, a.dtype, a.device, "sdpa", a.seed)
    hf_config: Any = model.config
    vocab = int(hf_config.vocab_size)
    requests = request_set(a.requests, a.prompt, a.prompt_spread, a.new, a.new_spread, vocab, a.seed)
    began = time.perf_counter()
    outputs = serve(model, requests, a.rate, not a.no_warmup, a.per_step, a.max_batch_tokens)
    said = own_clock(outputs, began, time.perf_counter())
    said["lengths"] = [[len(prompt), new] for prompt, new in requests]
    print(PREFIX + json.dumps(said), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
