"""What the operator probe costs a serving loop's iterations, and where its time goes: transformers' continuous batching
(the serving GPU test's 1B Llama shape by default, random weights) served in one process, its iterations (the
engine's step function, as config ``step_functions`` names it) timed plain and under the probe: dispatch mode only,
with the count, with the count and the NVTX marks (as the timeline job's launch probes every step). The arms take
turns over ``--rounds``; each line: median iteration (ms) and the sum over the run. Then one run under the full probe
with cProfile inside the iterations (the engine's own thread), its top functions by own time.

    python3 benchmarks/probe_serving.py [--device cuda] [--requests 64] [--rounds 2] [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_serving import SERVE_1B  # noqa: E402  # the GPU test's model shape

from nsightflow.capture.inside.flops import Tally  # noqa: E402
from nsightflow.capture.inside.probe import op_probe  # noqa: E402
from nsightflow.workloads import serving  # noqa: E402
from nsightflow.workloads.hf import load_model  # noqa: E402

ARMS = ("plain", "dispatch", "count", "count+marks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", default=json.dumps(SERVE_1B))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, nargs=2, default=(256, 192), help="mean and spread")
    ap.add_argument("--new", type=int, nargs=2, default=(64, 48), help="mean and spread")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    model = load_model(None, json.loads(a.config), a.dtype, a.device, "sdpa", 0)
    requests = serving.request_set(a.requests, *a.prompt, *a.new, int(model.config.vocab_size), 0)
    module, qualname = serving.STEP.split(":")
    owner, name = qualname.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), owner)
    step = cls.__dict__[name]
    state: dict[str, Any] = {"arm": "plain", "times": [], "prof": None, "tally": Tally()}

    def timed_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        arm, tally, prof = state["arm"], state["tally"], state["prof"]
        if prof is not None:
            prof.enable()
        began = time.perf_counter()
        if arm == "plain":
            out = step(self, *args, **kwargs)
        else:
            counting = arm != "dispatch"
            probe = op_probe("nsightflow" if arm == "count+marks" else None, tally if counting else None, None)
            if counting:
                tally.begin("iteration")
            with probe:
                out = step(self, *args, **kwargs)
            if counting:
                tally.end()
        state["times"].append(time.perf_counter() - began)
        if prof is not None:
            prof.disable()
        return out

    setattr(cls, name, functools.wraps(step)(timed_step))
    serving.serve(model, requests, 0, False)  # warm: cuBLAS, the allocator, the JIT cache
    for r in range(a.rounds):
        for arm in ARMS:
            state["arm"], state["times"] = arm, []
            serving.serve(model, requests, 0, False)
            t = state["times"]
            print(f"round {r} {arm:12s} {len(t)} iterations, median {statistics.median(t) * 1e3:8.2f} ms, "
                  f"sum {sum(t):7.2f} s", flush=True)  # fmt: skip
    state["arm"], state["times"], state["prof"] = "count+marks", [], cProfile.Profile()
    serving.serve(model, requests, 0, False)
    print(f"under cProfile: {len(state['times'])} iterations, sum {sum(state['times']):.2f} s")
    text = io.StringIO()
    pstats.Stats(state["prof"], stream=text).sort_stats("tottime").print_stats(a.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
