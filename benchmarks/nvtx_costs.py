"""What one NVTX push/pop pair costs, in the forms the probe pass could mark an operator with, with no tool attached and
inside nsys's capture range (run it under ``nsys profile`` with the timeline job's flags: see the usage). The probe
marks about 35,000 operators in the 8B-shaped decoder's pass; each form below pushes that many ranges, over 300
distinct messages as a decode step's distinct calls, payload = the operator's index in its step (0-1,099).

Usage (from the project root, after ``. .gpu-bundle/activate.sh``):
  python3 benchmarks/nvtx_costs.py                # no tool attached
  nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \
    --capture-range=cudaProfilerApi --capture-range-end=none --export=none -o /tmp/nc \
    python3 benchmarks/nvtx_costs.py              # traced, as the timeline job traces the probe pass
"""

from __future__ import annotations

import time
from collections.abc import Callable

import nvtx
import torch
import torch.cuda.profiler as cuda_profiler

N, MESSAGES, STEP = 35_000, 300, 1_100


def _time(label: str, body: Callable[[int], None]) -> None:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for i in range(N):
            body(i)
        best = min(best, time.perf_counter() - start)
    print(f"{label:58s} {best:6.3f} s  {best / N * 1e6:6.2f} µs a pair", flush=True)


def main() -> None:
    gpu = torch.cuda.is_available()
    if gpu:
        torch.zeros(1, device="cuda")  # a CUDA context, as in the harness
        cuda_profiler.start()  # under nsys: its capture range opens here, as before the timeline's probe pass
    dom = nvtx.get_domain("nsightflow.ops")
    msgs = [f"op{k}#{k * 7919:012x}" for k in range(MESSAGES)]
    by_msg = {m: dom.get_event_attributes(message=m) for m in msgs}
    by_pair: dict[tuple[str, int], object] = {}

    def preset(i: int) -> object:
        key = (msgs[i % MESSAGES], i % STEP)
        attrs = by_pair.get(key)
        if attrs is None:
            attrs = by_pair[key] = dom.get_event_attributes(message=key[0], payload=key[1])
        return attrs

    def cats(i: int) -> object:
        key = (msgs[i % MESSAGES], i % STEP)
        attrs = by_pair.get(key)
        if attrs is None:
            attrs = by_pair[key] = dom.get_event_attributes(message=key[0], category=1 + key[1])
        return attrs

    _time("python loop, no NVTX call", lambda i: (msgs[i % MESSAGES], i % STEP))
    _time("registered message, payload set per push (the probe)", lambda i: _pair(dom, by_msg[msgs[i % MESSAGES]], i))
    _time("registered message and payload preset per (message, index)", lambda i: _pair(dom, preset(i)))
    by_pair.clear()
    _time("registered message, category = index, preset", lambda i: _pair(dom, cats(i)))
    _time("registered message, no payload", lambda i: _pair(dom, by_msg[msgs[i % MESSAGES]]))
    glob = nvtx.get_domain(None)
    plain = {m: glob.get_event_attributes(message=m) for m in msgs}
    _time("default domain, registered message, no payload", lambda i: _pair(glob, plain[msgs[i % MESSAGES]]))
    _time("nvtx.push_range(message=...) per call, its domain", lambda i: _string(msgs[i % MESSAGES]))
    if gpu:
        cuda_profiler.stop()


def _pair(dom: nvtx.Domain, attrs: object, payload: int | None = None) -> None:
    if payload is None:
        dom.push_range(attrs)
    else:
        dom.push_range(attrs, payload=payload)
    dom.pop_range()


def _string(message: str) -> None:
    nvtx.push_range(message=message, domain="nsightflow.ops")
    nvtx.pop_range(domain="nsightflow.ops")


if __name__ == "__main__":
    main()
