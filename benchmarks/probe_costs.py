"""Where the probe pass's time goes, on the GPU host: the 8B-shaped decoder's passes timed one by one (ranged, probe
with nothing on, with the NVTX marks, with the count, with both), then, with ``prof``, one cProfile of the counting
and marking probe.

Usage (from the project root, after ``. .gpu-bundle/activate.sh``):
  python3 benchmarks/probe_costs.py prof          # no profiler attached
  nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \
    --capture-range=cudaProfilerApi --capture-range-end=none --export=none -o /tmp/pc \
    python3 benchmarks/probe_costs.py             # the same passes traced, as the timeline job traces them
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmark import EIGHT_B  # benchmarks/ is on the path of a script run from it

from nsightflow.capture.inside import passes
from nsightflow.workloads import decoder


def _timed(label: str, fn: Callable[[], Any]) -> None:
    start = time.perf_counter()
    fn()
    print(f"{label}: {time.perf_counter() - start:.2f} s", flush=True)


def main() -> None:
    w = decoder.build(**EIGHT_B)
    passes.warm_up(w, 1)
    passes.capture_range(True)  # under nsys with a capture range: tracing starts here, as in the timeline job
    _timed("ranged", lambda: passes.run_profiled(w, "nsightflow", warmup=0))
    _timed("probe bare", lambda: passes.probe_pass(w, None, count=False))
    _timed("probe mark", lambda: passes.probe_pass(w, "nsightflow", count=False))
    _timed("probe count", lambda: passes.probe_pass(w, None, count=True))
    _timed("probe mark+count", lambda: passes.probe_pass(w, "nsightflow", count=True))
    if sys.argv[1:] == ["prof"]:
        prof = cProfile.Profile()
        prof.enable()
        passes.probe_pass(w, "nsightflow", count=True)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(22)
        print(out.getvalue()[-6000:])


if __name__ == "__main__":
    main()
