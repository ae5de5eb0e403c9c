"""Who takes CPU time while a command's timed run runs beside its gated nsys launch? The timeline job runs the timed
run with the nsys launch started beside it, its program waiting at the hook's gate (nsightflow.capture.inside.gate);
the GPU tier saw the timed run's launch-bound steps 49% slower so, pinned to one CPU with it, and a serving loop's
tokens/s 8% lower unpinned. This runs the command's timed run alone and beside the gated nsys launch, in turns, and
while each runs reads every thread's CPU time of every process under this one (``/proc/PID/task/TID/stat``) every
``--every`` seconds: the CPU seconds each (process, thread name) took while the timed run ran, beside the program's
own step walls (each stage's median and 10th percentile).

    python3 benchmarks/neighbour_cpu.py --cpus 3 --rounds 2 -- python3 examples/nvtx_program.py --steps 2000
    python3 benchmarks/neighbour_cpu.py --step-function iteration=MODULE:QUALNAME -- python3 -m ...serving ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.launch import nsys
from nsightflow.capture.launch.command import _timed, timed_beside
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.read.own_metrics import own_metrics

TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int(d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids[ppid].append(int(d.name))
    return kids


def _label(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [Path(a.decode(errors="replace")).name for a in argv[:3] if a]
    return " ".join(words)[:40]


def sample() -> dict[tuple[int, int], tuple[str, str, float]]:
    """CPU seconds so far of every thread of every process under this one: (pid, tid) -> (process, thread, s)."""
    kids, todo, seen = _children(), [os.getpid()], {}
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        if pid == os.getpid():
            continue
        label = _label(pid)
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for t in tasks:
            try:
                text = t.joinpath("stat").read_text()
            except OSError:
                continue
            comm = text[text.index("(") + 1 : text.rindex(")")]
            f = text.rsplit(")", 1)[1].split()
            seen[(pid, int(t.name))] = (f"{pid} {label}", comm, (int(f[11]) + int(f[12])) / TICK)
    return seen


class Sampler:
    """Samples in a thread while open; ``between(t0, t1)``: CPU seconds by (process, thread) in that interval."""

    def __init__(self, every: float) -> None:
        self.every, self.samples, self._stop = every, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), sample()))
            self._stop.wait(self.every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t0: float, t1: float) -> dict[tuple[str, str], float]:
        inside = [s for t, s in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            return {}
        first, last = inside[0], inside[-1]
        used: dict[tuple[str, str], float] = defaultdict(float)
        for key, (proc, comm, s) in last.items():
            used[(proc, comm)] += s - (first[key][2] if key in first else 0.0)
        return dict(used)


def _walls(found) -> str:
    out = []
    for stage, walls in found.walls.items():
        xs = sorted(w for w in walls if w is not None)
        if xs:
            p10 = xs[len(xs) // 10]
            out.append(f"{stage}: median {statistics.median(xs) * 1e3:.3f} ms, p10 {p10 * 1e3:.3f} ms, n {len(xs)}")
    return "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    ap.add_argument("--cpus", help="pin this process and its children to these CPUs (comma-separated)")
    ap.add_argument("--step-function", action="append", default=[], help="STAGE=module:qualname")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--arms", default="alone,beside", help="in turns: alone, beside (under nsys), plain (no profiler)")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    functions = dict(s.split("=", 1) for s in args.step_function)
    call = CommandCall(argv, step_functions=functions, warmup_steps=0)
    nsys_bin = shutil.which("nsys") or "nsys"
    for r in range(args.rounds):
        for arm in args.arms.split(","):
            tmp = tempfile.mkdtemp(prefix="neighbour-")
            with Sampler(args.every) as sampler:
                if arm == "alone":
                    found, timed = _timed(call, tmp, f"{tmp}/log", None)
                else:
                    base = HookSettings("probe", None, call.domain, call.stages, call.mirror)
                    settings = replace(base, flops_out=f"{tmp}/f.json", out=f"{tmp}/rec.json")
                    wrap = nsys.profile_argv(nsys_bin, f"{tmp}/n", []) if arm == "beside" else []
                    found, timed, _ = timed_beside(call, tmp, f"{tmp}/log", None, settings, wrap)
            said = own_metrics(str(timed[0].get("output") or ""))
            pace = said.get("tokens_per_s", float("nan"))
            print(f"round {r} {arm:6s} {_walls(found)}; tokens/s {pace:.1f}", flush=True)
            ranges = timed[0].get("ranges") or []
            if ranges:  # from the timed program's first step's start to its last step's end (perf_counter: monotonic)
                window = (min(x[4] for x in ranges) / 1e9, max(x[5] for x in ranges) / 1e9)
                used = sampler.between(*window)
                top = sorted(used.items(), key=lambda kv: -kv[1])[: args.top]
                print(f"  CPU seconds in the timed program's steps ({window[1] - window[0]:.2f} s):", flush=True)
                for (proc, comm), s in top:
                    print(f"    {s:7.2f}  {proc:48s} {comm}", flush=True)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
