"""Nsight Compute: the metric sets, the capture and export commands, and the diagnosis of a capture's log.
(Reading its raw CSV exports: nsightflow.capture.read.ncu_csv.)

Findings this module is built on (ncu 2025.3.1, see ../shared/gpu-host/README.md):
- ``--profile-from-start off`` profiles every kernel launched between ``cudaProfilerStart`` and
  ``cudaProfilerStop``, from any thread and inside CUDA-graph replays: the harness opens those
  windows around exactly the launches a capture plan names (nsightflow.capture.inside.probe,
  nsightflow.capture.read.plan),
  so no NVTX filter is needed (and none can miss); the one kernel filter leaves communication kernels out
  (nsightflow.capture.read.comm: a replayed collective deadlocks the other ranks);
- "No kernels were profiled" exits 0: only the output tells;
- ncu prints shortened kernel names (``at::native::`` and ``(int)`` casts dropped): results are
  joined to the timeline by order, with grid, block and a name key checked (nsightflow.capture.read.matching);
- range replay refuses SASS instruction counts: range captures use the hardware counters only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from nsightflow.capture.inside.progress import PROFILING
from nsightflow.capture.read.comm import NCU_FILTER
from nsightflow.errors import CaptureError

# What config `ncu` allows (workflow/schemas/config.schema.yaml holds the defaults).
ReplayMode = Literal["kernel", "application", "range", "app-range"]
ClockControl = Literal["none", "base"]
CacheControl = Literal["all", "none"]

RANGE_REPLAY_MODES = ("range", "app-range")  # one result per window


def capture_argv(
    ncu: str,
    out_base: str | Path,
    program: list[str],
    *,
    metrics: list[str] | None = None,
    sections: list[str] | None = None,
    replay_mode: ReplayMode,
    clock_control: ClockControl,
    cache_control: CacheControl,
    comm_filter: bool = True,
) -> list[str]:
    """The ncu command line of a windowed capture (an argv list: no shell ever sees a name from the config).

    ``--profile-from-start off``: nothing is profiled until the program opens a window. Range replay refuses
    that option (ncu 2025.3.1); there the program's start/stop pairs are the ranges themselves. ``comm_filter``:
    the kernel-name filter that keeps NCCL's kernels out of the windows; ncu tests it on every launch of the program
    (about 0.08 ms each: 2.8 s of an 8B-shaped decoder's 34,092), so a plan whose stages launch none goes without.
    """
    start = [] if replay_mode in RANGE_REPLAY_MODES else ["--profile-from-start", "off"]
    argv = [
        ncu,
        "--force-overwrite",
        "--export",
        str(Path(out_base).resolve()),  # absolute: the program may run in another folder (a command's cwd:)
        "--nvtx",
        *start,
        f"--replay-mode={replay_mode}",
        f"--clock-control={clock_control}",
        f"--cache-control={cache_control}",
    ]
    if replay_mode not in RANGE_REPLAY_MODES and comm_filter:
        argv += NCU_FILTER  # communication kernels are never profiled (nsightflow.capture.read.comm)
    for section in sections or []:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    return argv + list(program)


def reference_argv(
    ncu: str, out_base: str | Path, domain: str, stages: list[str], metrics: list[str], program: list[str]
) -> list[str]:
    """ncu over every launch inside the named stages' NVTX ranges: the brute-force capture a user would make
    without nsightflow, kept as the reference its numbers and costs are checked against (benchmark, GPU tier).
    NVTX filters are per thread: right for one-threaded workloads only."""
    argv = [ncu, "--force-overwrite", "--export", str(out_base), "--nvtx", *NCU_FILTER]
    for stage in stages:
        argv += ["--nvtx-include", f"{domain}@{stage}/"]
    return argv + ["--clock-control=none", "--cache-control=all", "--metrics", ",".join(metrics), *program]


_REFUSALS = [
    (
        "Unsupported API during capture",
        "range replay refused an API the workload calls inside the range "
        "(PyTorch calls cuKernelSetAttribute): use ncu.ranges 'app-range'",
    ),
    (
        "ERR_NVGPUCTRPERM",
        "no permission to read GPU performance counters: run as root or set "
        "NVreg_RestrictProfilingToAdminUsers=0 for the nvidia kernel module",
    ),
    (
        "not supported in range replay",
        "a metric (SASS instruction counts) is not collectable in range replay: "
        "range captures must use hardware counters only",
    ),
    ("Failed to find metric", "a requested metric does not exist on this GPU: check `ncu --query-metrics`"),
]


_PROFILED = re.compile(PROFILING + r' ".*?" - (\d+):')


def profiled_count(log_text: str) -> int:
    """Results ncu says it profiled: distinct ids of ``==PROF== Profiling "name" - ID:`` messages (application
    replay prints a result once per pass, each time in a new run of the program). Found anywhere in a line: the
    program shares ncu's output, and a process that prints without ending its line (two ranks printing at once, a
    progress bar) puts ncu's message after its text."""
    ids = set(_PROFILED.findall(log_text))
    return len(ids) if ids else log_text.count(PROFILING)


def warnings(log_text: str) -> list[str]:
    """ncu's own warnings and errors, one line each."""
    return [line.strip() for line in log_text.splitlines() if line.startswith(("==WARNING==", "==ERROR=="))]


def differs_from_plan(log_text: str, returncode: int, expected: int | None) -> bool:
    """Whether ncu ran as asked and profiled another number of launches than the plan names (not refused, not
    empty): the program launched something else in its windows."""
    causes = [fix for needle, fix in _REFUSALS if needle in log_text]
    empty = "No kernels were profiled" in log_text or "No ranges were profiled" in log_text
    return (
        expected is not None and not empty and returncode == 0 and not causes and profiled_count(log_text) != expected
    )


def check_capture(log_text: str, returncode: int, *, what: str, expected: int | None = None) -> None:
    """Raise CaptureError with a diagnosis when ncu was refused, profiled nothing (which exits 0), or
    profiled another number of launches than the plan names."""
    causes = [fix for needle, fix in _REFUSALS if needle in log_text]
    empty = "No kernels were profiled" in log_text or "No ranges were profiled" in log_text
    got = profiled_count(log_text)
    wrong = differs_from_plan(log_text, returncode, expected)
    if returncode == 0 and not empty and not causes and not wrong:
        return
    if wrong:
        lines = [
            f"ncu profiled {got} launches for {what}, the plan names {expected}: a capture that does not match "
            "its plan would be scaled wrongly, so it is refused.",
            "likely causes: the program launched other kernels under ncu than under nsys (non-deterministic "
            "dispatch, autotuning that differs run to run: warm up more), or another thread launched kernels "
            "while a window was open; ncu.capture 'every_launch' profiles whole steps instead.",
        ]
    else:
        lines = [f"ncu captured nothing for {what} (exit code {returncode})."]
    lines += [f"cause: {c}" for c in causes]
    if empty:
        lines.append(
            "ncu said: " + ("No kernels were profiled" if "No kernels" in log_text else "No ranges were profiled")
        )
        lines.append(
            "the program never opened a profiler window: it must run nsightflow's harness with --windows "
            "(cudaProfilerStart/Stop around the planned launches), under ncu --profile-from-start off"
        )
    tail = "\n".join(log_text.strip().splitlines()[-15:])
    raise CaptureError("\n".join(lines) + f"\n--- last lines of ncu output ---\n{tail}")
