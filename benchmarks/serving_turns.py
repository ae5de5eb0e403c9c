"""The built-in serving loop alone and in nsightflow's timed run, in turns, each with its own clock's figures and the
engine's phases: what the timed hook does to the program's pace with nothing beside it, and how much of the program's
``serve()`` the engine's set-up and teardown take (they are outside the workload's tokens per second).

Each round runs the loop alone and timed (``command._timed``, the timed run's hook, its step function and step
summary as the serving GPU test names them), alone first in even rounds and timed first in odd ones. The program is
this file with ``--program``: nsightflow.workloads.serving with its context manager's enter, body and exit and its
``serve()`` timed, printed as a line ``nsightflow-phases: ...`` beside its ``nsightflow-metrics`` line.

Usage (GPU host, project root, after ``. .gpu-bundle/activate.sh``; one run of the loop first fills the JIT cache):
``python3 benchmarks/serving_turns.py --rounds 5 -- --config '<model JSON>' --dtype bfloat16 --device cuda ...``;
``--cpus 2-5`` pins both arms to those CPUs (is one process's pace nearer the next one's when they run on the same?);
``--arms alone,nsys`` runs the loop under ``nsys profile`` as the timeline job builds it
(nsightflow.capture.launch.nsys; the program with no hook and no probe) instead of the timed run: what nsys's tracing
alone does to the pace, and the launch's wall with nsys's end and export. Each line ends with its launch's wall.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

STEP = "transformers.generation.continuous_batching.continuous_api:ContinuousBatchProcessor._generation_step"
SUMMARY = "nsightflow.capture.inside.summaries:transformers_batch"
PHASES = "nsightflow-phases: "


def program(args: list[str]) -> None:
    """The serving workload with its phases timed (the engine's context manager wrapped on the model)."""
    from nsightflow.workloads import serving

    took: dict[str, float] = {}
    serve = serving.serve

    def timed_serve(model: Any, *a: Any, **k: Any) -> Any:
        make = model.continuous_batching_context_manager

        @contextlib.contextmanager
        def phased(*x: Any, **y: Any) -> Iterator[Any]:
            inner = make(*x, **y)
            t0 = time.perf_counter()
            manager = inner.__enter__()
            t1 = time.perf_counter()
            took["enter"] = t1 - t0
            try:
                yield manager
            finally:
                t2 = time.perf_counter()
                took["body"] = t2 - t1
                inner.__exit__(None, None, None)
                took["exit"] = time.perf_counter() - t2

        model.continuous_batching_context_manager = phased
        began = time.perf_counter()
        out = serve(model, *a, **k)
        took["serve"] = time.perf_counter() - began
        print(PHASES + " ".join(f"{k}={v * 1e3:.1f}ms" for k, v in took.items()), flush=True)
        return out

    serving.serve = timed_serve
    serving.main(args)


def _line(tag: str, output: str) -> str:
    from nsightflow.capture.read.own_metrics import own_metrics

    said = own_metrics(output)
    phases = re.search(f"{PHASES}(.*)", output)
    return (
        f"{tag:6s} tokens/s {said.get('tokens_per_s', float('nan')):7.1f}  ttft p50 {said.get('ttft_ms_p50', 0):7.1f}"
        f"  tpot p50 {said.get('tpot_ms_p50', 0):6.2f}  served {said.get('served_s', float('nan')):6.3f} s"
        f"  {phases.group(1) if phases else ''}"
    )


def _cpus(spec: str) -> set[int]:
    """CPUs written as taskset's list: ``2-5,8``."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--program", action="store_true", help="run as the phased serving program (internal)")
    ap.add_argument("--cpus", default="", help="CPUs (e.g. 2-5,8) this script and every program it runs are pinned to")
    ap.add_argument("--arms", default="alone,timed", help="two of alone, timed, nsys: run in turns")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    if a.program:
        program(args)
        return
    from nsightflow.capture.launch.command import _timed
    from nsightflow.capture.launch.command_call import CommandCall

    if a.cpus:  # children inherit the affinity: both arms run on the same CPUs
        os.sched_setaffinity(0, _cpus(a.cpus))
        print(f"pinned to CPUs {sorted(os.sched_getaffinity(0))}", flush=True)

    argv = [sys.executable, __file__, "--program", "--", *args]
    call = CommandCall(argv, step_functions={"iteration": STEP}, step_inputs={"iteration": SUMMARY}, warmup_steps=0)

    def alone() -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    def timed() -> str:
        tmp = tempfile.mkdtemp(prefix="turns-")
        _, runs = _timed(call, tmp, f"{tmp}/log", None)
        return str(runs[0]["output"])

    def under_nsys() -> str:
        from nsightflow.capture.launch.nsys import profile_argv

        out = tempfile.mkdtemp(prefix="turns-nsys-")
        wrapped = profile_argv(shutil.which("nsys") or "nsys", f"{out}/t", argv)
        return subprocess.run(wrapped, capture_output=True, text=True, check=True).stdout

    arms = {"alone": alone, "timed": timed, "nsys": under_nsys}
    names = a.arms.split(",")
    if len(names) != 2 or not set(names) <= set(arms):
        ap.error(f"--arms {a.arms!r}: give two of {', '.join(arms)}, e.g. alone,nsys")
    first, second = names
    for r in range(a.rounds):
        for name in (first, second) if r % 2 == 0 else (second, first):
            began = time.monotonic()
            output = arms[name]()
            print(f"{_line(name, output)}  wall {time.monotonic() - began:6.2f} s", flush=True)


if __name__ == "__main__":
    main()
