"""Nsight Compute's metrics as nsightflow reads them: the counters behind the report (time, FLOPs by precision,
bytes, peaks), what each one counts, and which precisions and non-tensor FLOPs a capture collects. Vocabulary
shared by the capture's command line and the readers of its exports."""

from __future__ import annotations

import re
from typing import Literal

from nsightflow.errors import ConfigError
from nsightflow.precisions import SIMT
from nsightflow.records import AnalyticCounts, StageCount

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
# the tensor operators the probe pass saw (nsightflow.capture.inside.flops: the input dtypes of every GEMM and attention
# call, TF32 where torch allowed it), and every precision where it cannot know: a stage whose operators were
# not all seen (CUDA-graph replays, a failed count) or a planned launch made outside any operator.
ALL_PRECISIONS = list(TENSOR_FLOP_METRICS)
TensorPrecisions = Literal["auto", "all"] | list[str]
MetricSpec = Literal["default"] | list[str]  # config ncu.metrics


NonTensorFlops = Literal["auto"] | bool


# Kernels that do matrix work on the tensor pipes, by name (cuBLAS's nvjet/xmma/gemm, CUTLASS, cuDNN's and
# FlashAttention's attention, Triton's matmul templates): launched by an operator the count has no formula for, their
# precision is unknown, so every one is collected. A false match costs replay passes (and, in a capture started
# before its plan, a second start of ncu), never a number: so "mma" only as a word's start (wgmma, hmma, xmma; not
# FusedAdamMathFunctor or GammaBetaBackward), and never Triton's pointwise and reduction kernels, which inductor
# names after the operators they fuse (triton_poi_fused__scaled_dot_product_cudnn_attention_...).
MATRIX_KERNEL = re.compile(
    r"^(?!triton_(?:poi|red|per)_).*?(?:gemm|gemv|(?<![a-z])(?:wg|[hwxi])?mma|cutlass|nvjet|cublas|flash|fmha|"
    r"attention|sdpa|triton_tem)",
    re.I | re.S,
)


def seen_precisions(
    analytic: AnalyticCounts, launches: list[tuple[str, int, str, str]]
) -> tuple[list[str] | None, list[str]]:
    """The tensor precisions of the GEMMs and attentions behind the planned ``launches`` ((stage, unit, class key,
    kernel name), see nsightflow.capture.read.plan; key and name '' where not known yet), as the probe pass saw them
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
    from nsightflow.formulas import op_class

    entries = {stage: analytic.stages.get(stage, StageCount()) for stage, *_ in launches}
    eager = {p for e in analytic.stages.values() if e.counted for p in e.tensor_precisions or []}
    seen: set[str] = set()
    how: dict[str, str] = {}
    for stage, unit, key, kernel in dict.fromkeys(launches):
        entry = entries[stage]
        op = key.split("|", 1)[0].split("#", 1)[0]
        if entry.no_formula:
            return None, [f"{stage}: operators without a FLOP formula ({', '.join(entry.no_formula)}): every precision"]
        if unit > 0 and unit % 2 == 1 and op and op_class(op) == "other" and MATRIX_KERNEL.search(kernel):
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
