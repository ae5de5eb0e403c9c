"""On the GPU host: whether one process's pace, measured in that process on work no profiler touches, explains why
the decode step of the wall-time test (tests/test_gpu.py::test_wall_time_is_the_programs_not_the_profilers) differs
by up to 2.3x from one launch to the next. Each launch first times, in its own process before the harness runs,
pure Python (dicts and calls), torch's CPU dispatcher (one-element adds on a CPU tensor), a memory gather (numpy),
and CUDA launches (one-element adds, synchronized: what nsys could slow, shown, never used to normalize); then runs
the test's harness (``--timed``) alone or under nsys with the timeline job's flags, arms interleaved. It prints each
arm's decode step, how each pace correlates with it over all launches, and the arms' ratio raw and divided by each
CPU pace, with a bootstrap interval over the launches. Usage (from the project root, after
``. .gpu-bundle/activate.sh``): ``python3 benchmarks/pace_covariate.py [launches per arm]``"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGS = {"batch": 1, "prompt": 128, "decode_steps": 16, "n_layers": 16}  # the wall-time test's program
CPU_PACES = ("python", "torch_cpu", "memory")


def _best(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timings of ``fn()``, seconds."""
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _python() -> None:
    d = {i: i * 3 for i in range(2000)}

    def f(k: int) -> int:
        return d[k] + 1

    s = 0
    for _ in range(100):
        for k in range(2000):
            s += f(k)


def paces() -> dict[str, float]:
    """This process's paces, seconds per unit of work (see the module's docstring)."""
    import numpy as np
    import torch

    out = {"python": _best(_python, 7)}
    x = torch.zeros(1)

    def cpu_adds() -> None:
        for _ in range(20000):
            x.add_(1)

    out["torch_cpu"] = _best(cpu_adds, 5)
    a = np.arange(32 * 2**20, dtype=np.int64)  # 256 MB
    idx = np.random.default_rng(0).integers(0, a.size, 4 * 2**20)
    out["memory"] = _best(lambda: a[idx].sum(), 3)
    y = torch.zeros(1, device="cuda")

    def cuda_adds() -> None:
        for _ in range(5000):
            y.add_(1)
        torch.cuda.synchronize()

    cuda_adds()
    out["cuda_launch"] = _best(cuda_adds, 3)
    return out


def child(cal_out: str, harness_argv: list[str]) -> None:
    """One launch: the paces, then the harness as the workflow runs it (it ends the process)."""
    Path(cal_out).write_text(json.dumps(paces()))
    from nsightflow.capture.inside.harness import launch

    launch(harness_argv)


def _corr(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    return sxy / math.sqrt(sum((a - mx) ** 2 for a in lx) * sum((b - my) ** 2 for b in ly))


def _ratio(alone: list[float], nsys_: list[float]) -> tuple[float, float, float]:
    """Median of the nsys arm over median of the alone arm, and a 90% bootstrap interval over launches."""
    rng = random.Random(0)
    boot = sorted(
        statistics.median(rng.choices(nsys_, k=len(nsys_))) / statistics.median(rng.choices(alone, k=len(alone)))
        for _ in range(2000)
    )
    return statistics.median(nsys_) / statistics.median(alone), boot[100], boot[1899]


def main() -> None:
    from nsightflow.capture.launch import nsys

    per_arm = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2 * per_arm):
            profiled = i % 2 == 1
            out, cal = f"{tmp}/run{i}.json", f"{tmp}/cal{i}.json"
            harness = ["--args", json.dumps(ARGS), "--out", out, "--timed"]
            argv = [sys.executable, __file__, "--child", cal, *harness]
            if profiled:  # what the timeline job runs (nsightflow.capture.launch.tools.timeline)
                argv = nsys.profile_argv(shutil.which("nsys") or "nsys", f"{tmp}/t{i}", argv, capture_range="none")
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
            got = json.loads(Path(out).read_text())
            row = {"nsys": profiled, "step": statistics.median(got["program_wall_s"]["decode"])}
            row.update(json.loads(Path(cal).read_text()))
            rows.append(row)
            print(
                f"launch {i:2d} {'nsys ' if profiled else 'alone'} step {row['step'] * 1e3:6.2f} ms; "
                + ", ".join(f"{k} {row[k] * 1e3:.2f} ms" for k in (*CPU_PACES, "cuda_launch")),
                flush=True,
            )
    alone = [r for r in rows if not r["nsys"]]
    under = [r for r in rows if r["nsys"]]
    steps = [r["step"] for r in rows]
    print(f"\n{per_arm} launches an arm; correlation (of logs) with the decode step over all {len(rows)} launches:")
    for k in (*CPU_PACES, "cuda_launch"):
        a, u = statistics.median(r[k] for r in alone), statistics.median(r[k] for r in under)
        print(
            f"  {k:12s} r = {_corr(steps, [r[k] for r in rows]):+.2f}; "
            f"medians alone {a * 1e3:.2f}, nsys {u * 1e3:.2f} ms"
        )
    print("nsys arm over alone arm, median of launches (90% bootstrap interval), max/min within each arm:")
    for k in (None, *CPU_PACES):
        xa = [r["step"] / (r[k] if k else 1) for r in alone]
        xu = [r["step"] / (r[k] if k else 1) for r in under]
        mid, lo, hi = _ratio(xa, xu)
        print(
            f"  step{' / ' + k if k else ''}: {mid - 1:+.1%} ({lo - 1:+.1%} to {hi - 1:+.1%}); spread alone "
            f"{max(xa) / min(xa):.2f}, nsys {max(xu) / min(xu):.2f}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
    else:
        main()
