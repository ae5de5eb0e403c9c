"""Measured ceilings: the matrix-multiply rate and copy bandwidth this device really reaches.

Datasheet peaks are not reachable in practice, and a CPU has none worth quoting. Short
microbenchmarks give achievable denominators for MFU and bandwidth utilisation, shown beside
the datasheet or ncu peaks. Each takes the best of several timed repetitions after a warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nsightflow.capture.launch.backend import cpu_name
from nsightflow.precisions import tensor_precision

# Sizes: big enough to reach steady state, small enough to finish in seconds.
# (on this workplace's CPU bf16 reaches 19 GFLOP/s at 1024, 20 at 1536, 21 at 2048 (4 minutes for both layouts);
# a measured rate is a reference, not a proven bound: the report says so when a stage runs faster)
SIZES = {
    "cuda": {"matmul_n": 8192, "copy_bytes": 1 << 30, "reps": 20},
    "cpu": {"matmul_n": 1536, "copy_bytes": 1 << 27, "reps": 5},
}


def device_name(device: str) -> str:
    """The device's name: the GPU's from CUDA, else the CPU model from /proc/cpuinfo or platform."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return cpu_name()


def _timer(device: str) -> Callable[[Callable[[], Any]], float]:
    import torch

    def timed(fn: Callable[[], Any]) -> float:
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return timed


def _faster_layout(device: str, dtype: Any, timed: Callable[[Callable[[], Any]], float]) -> str:
    import torch

    x = torch.randn(256, 256, device=device).to(dtype)
    y = torch.randn(256, 256, device=device).to(dtype)
    runs: dict[str, Callable[[], object]] = {"a @ b.T": lambda: x @ y.t(), "a @ b": lambda: x @ y}
    best: dict[str, float] = {}
    for name, fn in runs.items():
        fn()
        best[name] = min(timed(fn) for _ in range(3))
    return min(best, key=lambda k: best[k])


def measure(
    device: str, dtype: str, matmul_n: int | None = None, copy_bytes: int | None = None, reps: int | None = None
) -> dict[str, Any]:
    """Best achieved matmul FLOP/s (2·n³ per n×n product, in ``dtype``, best layout) and copy bytes/s (read + write)."""
    import torch

    kind = "cuda" if device.startswith("cuda") else "cpu"
    size = SIZES[kind]
    n = matmul_n or size["matmul_n"]
    nbytes = copy_bytes or size["copy_bytes"]
    reps = reps or size["reps"]
    torch_dtype = getattr(torch, dtype)
    timed = _timer(device)
    a = torch.randn(n, n, device=device).to(torch_dtype)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    c = torch.empty(n, n, device=device, dtype=torch_dtype)
    # Two layouts: a @ b, and a @ bᵀ as nn.Linear multiplies (on some CPUs bf16 a @ b takes a path 20x slower):
    # the faster one, chosen on small matrices, is the one timed.
    layout = _faster_layout(device, torch_dtype, timed)
    fn: Callable[[], object] = (
        (lambda: torch.matmul(a, b.t(), out=c)) if layout == "a @ b.T" else (lambda: torch.matmul(a, b, out=c))
    )
    fn()  # warm-up: library handles, autotuning
    mm_runs = sorted(timed(fn) for _ in range(reps))
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)
    cp_runs = sorted(timed(lambda: dst.copy_(src)) for _ in range(reps))
    mm, cp = mm_runs[0], cp_runs[0]
    return {
        "device": device,
        "device_name": device_name(device),
        "dtype": dtype,
        # float32 multiplies as TF32 where this process allows it, as the workload's own GEMMs (capture.flops)
        "precision": tensor_precision(dtype, torch.backends.cuda.matmul.allow_tf32),
        "matmul_flops_per_s": 2 * n**3 / mm,
        "copy_bytes_per_s": 2 * src.numel() * 4 / cp,
        "matmul_runs": [2 * n**3 / t for t in reversed(mm_runs)],
        "copy_runs": [2 * src.numel() * 4 / t for t in reversed(cp_runs)],
        "threads": torch.get_num_threads(),
        "method": {
            "matmul": f"best of {reps} of {layout} (the faster of a @ b and a @ b.T): {n}x{n} by {n}x{n} "
            f"in {dtype}, 2*n^3 FLOPs",
            "copy": f"best of {reps}: copy of {src.numel() * 4} bytes, counted as read + write",
        },
        "torch": torch.__version__,
    }
