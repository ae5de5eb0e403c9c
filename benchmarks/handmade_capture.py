"""Run workloads the way a user annotates a script by hand (the NVTX guide's way), without nsightflow's harness.

Each stage step runs inside ``nvtx.annotate("LLM@<stage>", domain="LLM", payload=step)`` with a
``torch.cuda.synchronize()`` before the range ends; with ``--nest``, a repeated stage's steps are
``LLM@<stage>_step`` ranges inside one ``LLM@<stage>_all`` range, as the guide names a decode loop. No
probe pass, no profiler windows: what nsys and ``ncu --nvtx --nvtx-include`` record of this program is a
capture made by hand, for ``--config captures=DIR`` and for the name corpus in tests/data.

``--timed``: before the ranged pass, one pass with no NVTX whose per-step wall times (synchronized) are
printed as JSON (``timed: {...}``); with ``--start-after-timed`` the CUDA profiler API's start follows it, so
a profiler with a capture range (``nsys --capture-range=cudaProfilerApi``, ``ncu --profile-from-start off``)
records only the ranged pass. Used on the GPU host to measure what a profiler does to wall time.

Usage: python benchmarks/handmade_capture.py [--nest] [--timed] [--start-after-timed] [--warmup N]
       NAME=package.module:function:JSON_ARGS [...]
"""

from __future__ import annotations

import argparse
import json
import time

import nvtx
import torch

from nsightflow.workloads.api import load_callable


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _steps(workload):
    """(stage, step index) in the order the workload runs them, over its iterations."""
    count: dict[str, int] = {}
    for _ in range(workload.iterations):
        for stage in workload.stages:
            for _ in range(stage.repeats):
                step = count.get(stage.name, 0)
                count[stage.name] = step + 1
                yield stage, step


def run(workload, prefix: str, nest: bool) -> None:
    """One ranged pass in domain LLM, stages named ``LLM@<prefix><stage>``."""
    domain = nvtx.get_domain("LLM")
    workload.setup()
    _sync()
    outer = None
    for stage, step in _steps(workload):
        name = f"LLM@{prefix}{stage.name}"
        if nest and stage.repeats > 1:
            if step % stage.repeats == 0:
                outer = domain.start_range(message=f"{name}_all")
            name = f"{name}_step"
        with nvtx.annotate(name, domain="LLM", payload=step):
            stage.fn(step)
            _sync()
        if outer is not None and (step + 1) % stage.repeats == 0:
            domain.end_range(outer)
            outer = None


def timed(workload) -> dict[str, list[float]]:
    """Per-step wall seconds of one pass with no NVTX, synchronized around each step."""
    out: dict[str, list[float]] = {}
    workload.setup()
    _sync()
    for stage, step in _steps(workload):
        t0 = time.perf_counter()
        stage.fn(step)
        _sync()
        out.setdefault(stage.name, []).append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="+", help="NAME=package.module:function:JSON_ARGS")
    ap.add_argument("--nest", action="store_true")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timed", action="store_true")
    ap.add_argument("--start-after-timed", action="store_true")
    ap.add_argument("--prefix-names", action="store_true", help="name stages '<NAME>/<stage>'")
    ap.add_argument("--keep-going", action="store_true", help="a workload that fails is reported, the next runs")
    args = ap.parse_args()
    for item in args.workloads:
        try:
            one(item, args)
        except Exception as exc:  # noqa: BLE001 - reported, and the corpus goes on with the next program
            if not args.keep_going:
                raise
            print(f"failed {item.partition('=')[0]}: {type(exc).__name__}: {exc}", flush=True)


def one(item: str, args: argparse.Namespace) -> None:
    """Build one NAME=module:function:JSON workload and run its passes."""
    name, _, rest = item.partition("=")
    module, function, js = rest.split(":", 2)
    workload = load_callable(f"{module}:{function}")(**json.loads(js))
    for _ in range(args.warmup):
        workload.setup()
        for stage, step in _steps(workload):
            stage.fn(step)
        _sync()
    if args.timed:
        times = timed(workload)
        print("timed: " + json.dumps({"workload": name, "seconds": times}), flush=True)
    if args.start_after_timed:
        torch.cuda.profiler.start()
    run(workload, f"{name}/" if args.prefix_names else "", args.nest)
    if args.start_after_timed:
        torch.cuda.profiler.stop()
    print(f"ran {name}", flush=True)


if __name__ == "__main__":
    main()
