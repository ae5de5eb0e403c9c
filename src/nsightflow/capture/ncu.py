"""Nsight Compute: the metric sets, the capture and export commands, and the diagnosis of a capture's log.
(Reading its raw CSV exports: nsightflow.capture.ncu_csv.)

Findings this module is built on (ncu 2025.3.1, see ../shared/gpu-host/README.md):
- ``--profile-from-start off`` profiles every kernel launched between ``cudaProfilerStart`` and
  ``cudaProfilerStop``, from any thread and inside CUDA-graph replays: the harness opens those
  windows around exactly the launches a capture plan names (nsightflow.capture.probe, nsightflow.capture.plan),
  so no NVTX filter is needed (and none can miss); the one kernel filter leaves communication kernels out
  (nsightflow.capture.comm: a replayed collective deadlocks the other ranks);
- "No kernels were profiled" exits 0: only the output tells;
- ncu prints shortened kernel names (``at::native::`` and ``(int)`` casts dropped): results are
  joined to the timeline by order, with grid, block and a name key checked (nsightflow.capture.matching);
- range replay refuses SASS instruction counts: range captures use the hardware counters only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from nsightflow.capture.comm import NCU_FILTER
from nsightflow.capture.flops import SIMT
from nsightflow.capture.progress import PROFILING
from nsightflow.errors import CaptureError, ConfigError
from nsightflow.records import AnalyticCounts, StageCount

# What config `ncu` allows (workflow/schemas/config.schema.yaml holds the defaults).
ReplayMode = Literal["kernel", "application", "range", "app-range"]
ClockControl = Literal["none", "base"]
CacheControl = Literal["all", "none"]

# Metrics behind the default report: time, clocks, FLOPs by precision, bytes per memory level,
# and the peaks that turn them into utilisation. Counts do not depend on clocks; peaks are
# per-cycle rates multiplied by the clock measured in the same result.
TENSOR_FLOP_METRICS = {
    "bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "fp16": "sm__ops_path_tensor_src_fp16.sum",
    "tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "fp8": "sm__ops_path_tensor_src_fp8.sum",
    "fp64_tensor": "sm__ops_path_tensor_src_fp64.sum",
}
SASS_FLOP_METRICS = {  # (metric, FLOPs per thread instruction)
    "fp32": [
        ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2),
    ],
    "fp64": [
        ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", 2),
    ],
    "fp16": [
        ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 2),  # half2: two lanes
        ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 2),
        ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 4),
    ],
}
BYTE_METRICS = {
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "l2": "lts__t_bytes.sum",
    "l1": "l1tex__t_bytes.sum",
}
PEAK_METRICS = {
    "bf16_dense_per_cycle": "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
    "ffma_per_cycle": "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "dram_bytes_per_cycle": "dram__bytes.sum.peak_sustained",
    "l2_bytes_per_cycle": "lts__t_bytes.sum.peak_sustained",
    "l1_bytes_per_cycle": "l1tex__t_bytes.sum.peak_sustained",
}
TIME_METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "sm_hz": "sm__cycles_elapsed.avg.per_second",
    "dram_hz": "dram__cycles_elapsed.avg.per_second",
}


# What each metric nsightflow reads counts, so that a column's unit can be checked against it: a relabelled or swapped
# column (nanoseconds read as bytes) is refused, never turned into a plausible number.
def metric_kind(metric: str) -> str:
    """'time', 'frequency', 'bytes', 'bytes/cycle', 'count' or 'count/cycle' of one of nsightflow's metrics."""
    if metric == TIME_METRICS["duration_ns"]:
        return "time"
    if metric.endswith(".per_second"):
        return "frequency"
    per_cycle = metric.endswith(".peak_sustained")
    if "bytes" in metric:
        return "bytes/cycle" if per_cycle else "bytes"
    return "count/cycle" if per_cycle and "__sass_" in metric else "count"


DEFAULT_METRICS = (
    list(TIME_METRICS.values())
    + list(TENSOR_FLOP_METRICS.values())
    + [m for pairs in SASS_FLOP_METRICS.values() for m, _ in pairs]
    + list(BYTE_METRICS.values())
    + list(PEAK_METRICS.values())
)
# Each tensor-precision counter costs a replay pass of its own (H200: 6 passes with all five, 3 with one), and
# no counter tells the precisions apart more cheaply: the tensor pipes' active cycles
# (sm__pipe_tensor_op_hmma_cycles_active) also run in elementwise and reduction kernels, and
# sm__pipe_tensor_op_gmma_cycles_active is not collected on the H200. So the capture collects the precisions of
# the tensor operators the probe pass saw (nsightflow.capture.flops: the input dtypes of every GEMM and attention
# call, TF32 where torch allowed it), and every precision where it cannot know: a stage whose operators were
# not all seen (CUDA-graph replays, a failed count) or a planned launch made outside any operator.
ALL_PRECISIONS = list(TENSOR_FLOP_METRICS)
TensorPrecisions = Literal["auto", "all"] | list[str]
MetricSpec = Literal["default"] | list[str]  # config ncu.metrics


NonTensorFlops = Literal["auto"] | bool


# Kernels that do matrix work on the tensor pipes, by name (cuBLAS's nvjet/xmma/gemm, CUTLASS, cuDNN's and
# FlashAttention's attention, Triton's matmul templates): launched by an operator the count has no formula for, their
# precision is unknown, so every one is collected. A false match costs replay passes, never a number.
MATRIX_KERNEL = re.compile(r"gemm|gemv|mma|cutlass|nvjet|xmma|cublas|flash|fmha|attention|sdpa|triton_tem", re.I)


def seen_precisions(
    analytic: AnalyticCounts, launches: list[tuple[str, int, str, str]]
) -> tuple[list[str] | None, list[str]]:
    """The tensor precisions of the GEMMs and attentions behind the planned ``launches`` ((stage, unit, class key,
    kernel name), see nsightflow.capture.plan; key and name '' where not known yet), as the probe pass saw them
    (analytic_flops.json's ``tensor_precisions``), and how each stage's were decided; None where nobody can tell.

    - a launch of an operator (odd unit): the operators its stage's count saw; unknown where that operator has no
      GEMM or attention formula yet its kernel is named like matrix work (:data:`MATRIX_KERNEL`), or the stage ran
      operators named like matrix work with no formula (a custom op: its inputs' precision was never seen);
    - a whole-step window (unit -1: compiled code, or a step whose probe pass ran other kernels): the same operators
      run eagerly in the counting pass (a compiled model is counted eagerly), so its stage's count, where complete;
    - a launch between operators (even unit): a CUDA-graph replay, whose graph was captured from the same model's
      operators, takes the precisions the other stages' operators ran in (the eager probe's); anything else (a
      kernel launched by an extension that bypasses PyTorch's dispatcher) is unknown.
    """
    from nsightflow.capture.formulas import op_class

    entries = {stage: analytic.stages.get(stage, StageCount()) for stage, *_ in launches}
    eager = {p for e in analytic.stages.values() if e.counted for p in e.tensor_precisions or []}
    seen: set[str] = set()
    how: dict[str, str] = {}
    for stage, unit, key, kernel in dict.fromkeys(launches):
        entry = entries[stage]
        op = key.split("|", 1)[0].split("#", 1)[0]
        if entry.no_formula:
            return None, [f"{stage}: operators without a FLOP formula ({', '.join(entry.no_formula)}): every precision"]
        if unit % 2 == 1 and op and op_class(op) == "other" and MATRIX_KERNEL.search(kernel):
            return None, [f"{stage}: kernel {kernel[:60]!r} of operator {op}, which has no formula: every precision"]
        if (unit % 2 == 1 or unit < 0) and entry.counted:
            seen |= set(entry.tensor_precisions or [])
            how.setdefault(stage, "its operators in the counting pass")
        elif unit >= 0 and unit % 2 == 0 and entry.graph_replays and eager:
            seen |= eager
            how[stage] = "it replays CUDA graphs: the precisions of the operators of the stages run eagerly"
        else:
            why = "not counted" if not entry.counted else "kernels launched outside any operator"
            return None, [f"{stage}: {why}: every precision collected"]
    return sorted(seen), [f"{stage}: {text}" for stage, text in how.items()]


def _known(seen: list[str] | None) -> bool:
    """Whether every precision seen is one ncu counts (a tensor precision, or SIMT float32)."""
    return seen is not None and set(seen) <= set(ALL_PRECISIONS) | {SIMT}


def tensor_precisions(spec: TensorPrecisions, seen: list[str] | None) -> list[str]:
    """The tensor precisions a capture collects: config ``ncu.tensor_precisions`` ('auto': those ``seen`` by the
    probe pass, every one where it could not tell or saw one ncu has no counter for; 'all'; or a list)."""
    if spec == "all" or (spec == "auto" and not _known(seen)):
        return list(ALL_PRECISIONS)
    chosen = list(seen or []) if spec == "auto" else list(spec)
    unknown = [p for p in chosen if p not in TENSOR_FLOP_METRICS and p != SIMT]
    if unknown:
        raise ConfigError(f"ncu.tensor_precisions: unknown precision(s) {unknown}; known: {ALL_PRECISIONS}")
    out = [p for p in ALL_PRECISIONS if p in chosen]
    # None seen (float32 on the FMA units, or no GEMM at all): one pass still measures the tensor pipes' FLOPs, in the
    # precision float32 work would take there (TF32), so a stage's tensor FLOPs are a measured zero, never unknown.
    return (out or ["tf32"]) if spec == "auto" else out


# FMA-unit GEMM and attention work below this share of a stage's analytic FLOPs does not buy the SASS counts
# (a HuggingFace Llama's float32 rotary matmul: 16,384 of prefill's 1.15e11 FLOPs turned them on for every launch).
SIMT_MATERIAL = 0.005


def simt_share(analytic: AnalyticCounts, stages: list[str]) -> float | None:
    """The largest share, over ``stages``, of a stage's analytic FLOPs that GEMMs and attentions ran on the FMA
    units (float32 without TF32; analytic_flops.json's ``by_precision``); None where a stage does not say."""
    shares = []
    for stage in stages:
        entry = analytic.stages.get(stage, StageCount())
        by, total = entry.by_precision, entry.flops
        if by is None or total is None:
            return None
        shares.append(by.get(SIMT, 0) / total if total else 0.0)  # no FLOPs (an optimizer step): no FMA-unit GEMM
    return max(shares, default=None)


def non_tensor_flops(spec: NonTensorFlops, seen: list[str] | None, share: float | None = None) -> bool:
    """Whether a capture collects the SASS instruction counts behind FLOPs outside the tensor pipes (config
    ``ncu.non_tensor_flops``). They are instrumented: about 0.3 s more per profiled launch on the H200 (the
    default decoder's 72 launches: 16 s without, 37 s with), whether one or all nine are asked for. 'auto':
    only where GEMMs or attentions run on the FMA units (float32 without TF32) for a material share of a stage's
    FLOPs (``share`` ≥ SIMT_MATERIAL; unknown counts as material) or the probe could not tell; elsewhere they are
    the elementwise kernels' FLOPs (about 1% of an LLM's), reported as not collected."""
    if spec == "auto":
        if not _known(seen):
            return True
        return SIMT in (seen or []) and (share is None or share >= SIMT_MATERIAL)
    return bool(spec)


RANGE_REPLAY_MODES = ("range", "app-range")  # one result per window


def resolve_metrics(
    spec: MetricSpec, extra: list[str], precisions: list[str], non_tensor: bool = True, ranges: bool = False
) -> list[str]:
    """The metrics of a capture: config ``ncu.metrics`` plus ``extra_metrics``. 'default': time, the tensor FLOPs
    of ``precisions``, the SASS counts of non-tensor FLOPs (with ``non_tensor``), bytes and peaks. A range
    capture drops the SASS instruction counts, which range replay refuses."""
    if spec == "default":
        skip = {m for p, m in TENSOR_FLOP_METRICS.items() if p not in precisions}
        base = [m for m in DEFAULT_METRICS if m not in skip and (non_tensor or "__sass_" not in m)]
    else:
        base = list(spec)
    out = list(dict.fromkeys(base + list(extra)))
    return [m for m in out if "__sass_" not in m] if ranges else out


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
        argv += NCU_FILTER  # communication kernels are never profiled (nsightflow.capture.comm)
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


def details_argv(ncu: str, report: str | Path) -> list[str]:
    """The details page (every section's table and ncu's rule messages), as text."""
    return [ncu, "--import", str(report), "--page", "details", "--print-details", "all"]


def export_argv(ncu: str, report: str | Path) -> list[str]:
    """Raw page as CSV in base units (bytes, ns), one row per profiled result, kernels named by their mangled
    names: the one spelling nsys prints identically (nsightflow.capture.matching)."""
    return [ncu, "--import", str(report), "--page", "raw", "--csv", "--print-units", "base"] + [
        "--print-kernel-base",
        "mangled",
    ]


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
