"""The precisions of matrix work: the tensor-core formats by input dtype, the FMA units' float32, and the one a
run's MFU divides by. Vocabulary shared by what runs inside the program, what launches it and what reads its
exports (the names are those of nsightflow.ncu_metrics' FLOP counters)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nsightflow.formulas import CLASSES
from nsightflow.records import StageCount

# The tensor-core precision of a GEMM's or attention's inputs (the names of nsightflow.capture.launch.ncu's FLOP
# counters);
# float32 runs on tensor cores only as TF32, where torch allows it, else on the FMA units ('fp32'). Any other
# dtype is kept by its name.
TENSOR_PRECISIONS = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float64": "fp64_tensor",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
}


SIMT = "fp32"  # float32 matrix work on the FMA units (without TF32): its FLOPs are SASS counts, not tensor ones
UNKNOWN = "unknown"  # no precision can be told (or one with no FLOP peak, integers): no compute peak is taken


def tensor_precision(dtype: str, tf32: bool) -> str:
    """The precision matrix work on inputs of ``dtype`` runs in: a tensor-core one, TF32 for float32 where
    allowed, else 'fp32' (the FMA units); any other dtype keeps its name."""
    if dtype == "float32":
        return "tf32" if tf32 else SIMT
    return TENSOR_PRECISIONS.get(dtype, dtype)


# The dtype a precision's matrix work takes as input (the measured ceiling multiplies in it): TENSOR_PRECISIONS
# inverted (fp8: its first dtype, float8_e4m3fn), and float32 for TF32 and the FMA units.
PRECISION_DTYPE = {"tf32": "float32", SIMT: "float32", **{p: d for d, p in reversed(TENSOR_PRECISIONS.items())}}


@dataclass(frozen=True)
class MatmulPrecision:
    """The precision a run's MFU divides by (a peak's name) and the dtype of its matrix work; where that came
    from ('probe': the probe pass's GEMMs; 'declared': the workload's dtype, where the probe saw no GEMM;
    'fallback': no GEMM at all, float32 for the FMA units' work; 'unknown': nothing tells, or the GEMMs ran in
    a precision with no FLOP peak, such as integers: no compute peak is taken); how the report's diagnostics
    should say it ('warning', 'info', or '' when it is just the declared dtype); and why, in words."""

    precision: str
    dtype: str
    source: Literal["probe", "declared", "fallback", "unknown"]
    level: Literal["warning", "info", ""]
    why: str


def matmul_precision(declared: str | None, stages: dict[str, StageCount] | None) -> MatmulPrecision:
    """The precision of a workload's matrix work, as it ran: that of most GEMM and attention FLOPs in the probe
    pass (``stages``: the analytic count's, nsightflow.records; a tie goes to the declared dtype),
    else the declared dtype's, else float32. A model declared float32 that multiplies under autocast in bf16
    is measured against the bf16 peak: the declared dtype's would put MFU above 100%."""
    by: dict[str, float] = {}
    for rec in (stages or {}).values():
        for p, n in (rec.by_precision or {}).items():
            by[p] = by.get(p, 0) + n
    mine = tensor_precision(declared, tf32=False) if declared else None
    known = {p: n for p, n in by.items() if p in PRECISION_DTYPE and n > 0}
    if known:
        top = max(known, key=lambda p: (known[p], p == mine))
        why = f"{known[top] / sum(by.values()):.0%} of the GEMM and attention FLOPs of the probe pass ran in {top}"
        level: Literal["warning", "info", ""]
        if declared is None:
            level, why = "info", "not declared by the workload: " + why
        elif PRECISION_DTYPE[top] != declared:
            level, why = "warning", f"the workload declares {declared}, but {why}"
        else:  # as declared, or a declared float32 multiplying as TF32
            level, why = ("" if top == mine else "info"), f"the workload declares {declared}; {why}"
        return MatmulPrecision(top, PRECISION_DTYPE[top], "probe", level, why)
    other = sorted(p for p, n in by.items() if p not in PRECISION_DTYPE and n > 0)
    if other:
        why = f"the probe pass's GEMMs ran in {', '.join(other)}, which has no FLOP peak here: no MFU or HFU"
        return MatmulPrecision(UNKNOWN, "float32", "unknown", "warning", why)
    # No count, a stage not counted, or GEMM FLOPs counted without their precisions (an older count): blind.
    blind = stages is None or any(
        rec.not_counted or (not rec.by_precision and any((rec.by_class or {}).get(c) for c in CLASSES[:2]))
        for rec in stages.values()
    )
    seen = "no probe pass counted this launch" if stages is None else "the probe pass saw no GEMM FLOPs"
    if blind and stages is not None:
        missed = "; ".join(w for rec in stages.values() for w in rec.not_counted)
        seen = (
            f"the probe pass could not count every stage ({missed[:300]})"
            if missed
            else "the analytic count does not say which precision its GEMMs ran in"
        )
    if declared is not None:
        return MatmulPrecision(mine or declared, declared, "declared", "", f"declared by the workload ({seen})")
    if blind:
        # Nothing tells which precision the GEMMs ran in: no compute peak is taken (a float32 peak for bf16 work
        # would put MFU at many times 100%); the ceilings are measured in float32, as a reference only.
        why = f"not declared by the workload, and {seen}: no compute peak, so no MFU or HFU; declare its dtype"
        return MatmulPrecision(UNKNOWN, "float32", "unknown", "warning", why)
    why = f"not declared by the workload, and {seen}: its FLOPs run on the FMA units, float32 taken"
    return MatmulPrecision(SIMT, "float32", "fallback", "info", why)
