"""Nsight Systems' command lines: the profile of a program and the stats exports of a report (read by
nsightflow.capture.read.nsys_stats and nsightflow.capture.read.attribution)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

STATS_REPORTS = ("cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum")


def profile_argv(
    nsys: str,
    out_base: str | Path,
    program: list[str],
    trace: str = "cuda,nvtx",
    capture_range: Literal["", "none", "stop"] = "",
) -> list[str]:
    """``nsys profile`` of ``program``; writes ``out_base.nsys-rep`` and its SQLite export ``out_base.sqlite``.

    Kernels inside CUDA graphs are traced one by one (``--cuda-graph-trace=node``; by default nsys
    shows a replayed graph as one item and its kernels in no range). No OS-runtime tracing (it grows
    past GBs), no CPU sampling. ``capture_range``: trace from the program's ``cudaProfilerStart``; "none": to its
    exit (the harness's ``--timed`` pass runs before it, unslowed), its ``cudaProfilerStop`` ignored: stopping there
    made the program wait about 6 s for nsys's flush on an 8B-shaped decoder (H100), against about 3 s more at its
    exit; what it launches after its stages is in no stage's range. "stop": to its ``cudaProfilerStop`` (a window
    of a long run: what runs after it is not traced); "": the whole program."""
    window = ["--capture-range=cudaProfilerApi", f"--capture-range-end={capture_range}"] if capture_range else []
    return [
        nsys,
        "profile",
        f"--trace={trace}",
        "--sample=none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        *window,
        "--export=sqlite",
        "--force-overwrite=true",
        "-o",
        str(Path(out_base).resolve()),  # absolute: the program may run in another folder (a command's cwd:)
        *program,
    ]


def stats_argv(nsys: str, rep: str | Path, out_prefix: str | Path) -> list[str]:
    """``nsys stats`` writing ``PREFIX_<report>.csv`` per report and ``<rep>.sqlite`` beside the report."""
    argv = [nsys, "stats"]
    for report in STATS_REPORTS:
        argv += ["--report", report]
    return argv + ["--format", "csv", "--force-export=true", "--force-overwrite=true", "-o", str(out_prefix), str(rep)]
