"""What a profiled launch costs inside ncu's windows, by how the windows are laid out.

One program, several ncu launches with the workflow's flags and metrics (bf16 tensor FLOPs, no SASS counts): a loop of
decode-like launches (a bf16 GEMV and elementwise kernels, 2,000 launches), and 48 launches profiled in each variant:

  idle       nothing profiled (ncu's cost of every launch)
  one        one window over 48 consecutive launches of one kernel
  apart      48 windows of one launch each, one kernel
  distinct   48 windows of one launch each, over 12 kernels (4 launches of each)
  first      12 windows of one launch each, each kernel's first launch (12 kernels)

Each row: the kernels ncu profiled (a bf16 GEMV call launches two), the loop's seconds inside the program, ncu's whole
launch, and (loop - idle loop) / profiled kernels.
Run on the GPU host: ``python3 benchmarks/window_costs.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time

from nsightflow import ncu_metrics
from nsightflow.capture.launch import ncu

PROGRAM = r"""
import sys, time, torch
import torch.cuda.profiler as prof
variant = sys.argv[1]
dev = "cuda"
w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
x = torch.randn(4096, 1, device=dev, dtype=torch.bfloat16)
ops = [
    lambda: w @ x, lambda: x * 2, lambda: x + 1, lambda: torch.sin(x), lambda: torch.cos(x), lambda: torch.exp(x),
    lambda: torch.tanh(x), lambda: torch.sigmoid(x), lambda: torch.relu(x), lambda: x.float(),
    lambda: torch.sqrt(x.abs()), lambda: torch.neg(x),
]
for f in ops:
    f()
torch.cuda.synchronize()
N = 2000
if variant == "one":
    want = set(range(1000, 1048)); op_of = lambda i: 0
elif variant == "apart":
    want = set(range(0, N, N // 48)); op_of = lambda i: 0
elif variant == "distinct":
    want = set(range(0, N, N // 48)); op_of = lambda i: i % len(ops)
elif variant == "first":
    want = set(range(0, 12)); op_of = lambda i: i % len(ops)
else:
    want = set(); op_of = lambda i: i % len(ops)
start = time.perf_counter()
opened = False
for i in range(N):
    if i in want and not opened:
        prof.start(); opened = True
    elif i not in want and opened:
        prof.stop(); opened = False
    ops[op_of(i) if i in want else i % len(ops)]()
if opened:
    prof.stop()
torch.cuda.synchronize()
print(f"LOOP {time.perf_counter() - start:.3f}", flush=True)
"""

VARIANTS = ("idle", "one", "apart", "distinct", "first")


def capture_argv(ncu_bin: str, out: str, variant: str, metrics: list[str]) -> list[str]:
    """ncu over PROGRAM's ``variant`` with the workflow's capture flags (kernel replay, clocks left alone, caches
    flushed, no NCCL filter) and ``metrics``."""
    return ncu.capture_argv(
        ncu_bin,
        out,
        [sys.executable, "-c", PROGRAM, variant],
        metrics=metrics,
        replay_mode="kernel",
        clock_control="none",
        cache_control="all",
        comm_filter=False,
    )


def main() -> None:
    ncu_bin = shutil.which("ncu")
    if ncu_bin is None:
        raise SystemExit("ncu is not on PATH")
    metrics = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            argv = capture_argv(ncu_bin, f"{tmp}/{name}", name, metrics)
            start = time.perf_counter()
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            total = time.perf_counter() - start
            loop = float(next(line.split()[1] for line in out.splitlines() if line.startswith("LOOP")))
            rows.append((name, loop, total, ncu.profiled_count(out)))
    idle = rows[0][1]
    print(f"{'variant':10} {'profiled':>8} {'loop s':>8} {'ncu s':>8} {'ms/kernel':>10}")
    for name, loop, total, n in rows:
        per = (loop - idle) / n * 1e3 if n else float("nan")
        print(f"{name:10} {n:>8} {loop:8.2f} {total:8.2f} {per:10.1f}")


if __name__ == "__main__":
    main()
