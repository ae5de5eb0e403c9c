"""What bounds each stage, and what to try next: rules over a run's own measured numbers, in one place.

A stage is

- **launch/host**-bound when the device is busy less than ``BUSY_FLOOR`` of its wall time: the host (Python,
  launches, synchronizations) sets the pace, whatever the kernels do;
- else **compute**- or **memory**-bound when the busier of its compute use (executed FLOPs over the peak, else the
  model's) and its DRAM use (measured bytes over the peak, else the operators' bytes) reaches ``NEAR_PEAK``;
- else **latency**-bound: busy, yet neither unit near its peak (small or serial kernels, low occupancy);
- **unknown** where the numbers to decide are missing (the reason says which).

The rules only read ``stages.csv``'s columns (nsightflow.columns); ``bound`` and ``bound_why`` are written beside
them, so scripts and comparisons can use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

BUSY_FLOOR = 0.5  # device busy under half the wall time: the host sets the pace
NEAR_PEAK = 0.5  # a unit at half its peak or more (on busy time) is the one that bounds
LITTLE_LEFT = 0.8  # at this share of the measured ceiling little is left to gain in the kernels

BOUNDS = ("compute", "memory", "latency", "launch/host", "unknown")


@dataclass(frozen=True)
class StageBound:
    """A stage's bound, the numbers that decided it, and what to try next."""

    stage: str
    bound: str
    why: str
    advice: str


def _num(row: pd.Series, *names: str) -> tuple[float, str]:
    """The first finite value among ``names`` in ``row``, with its name; (nan, '') where none is."""
    for name in names:
        v = row.get(name, math.nan)
        if v is not None and isinstance(v, (int, float)) and math.isfinite(v):
            return float(v), name
    return math.nan, ""


def compute_use(row: pd.Series) -> tuple[float, str]:
    """A stage's compute use on busy time: executed FLOPs over the peak (HFU), else the model's (MFU)."""
    return _num(row, "hfu_busy", "mfu_busy")


def memory_use(row: pd.Series) -> tuple[float, str]:
    """A stage's memory use on busy time: measured DRAM bytes over the peak, else the operators' bytes."""
    return _num(row, "dram_bw_util_busy", "bw_util_busy_model")


# What to try next, by bound and by the device the stage ran on (a CPU has no graphs, occupancy or DRAM peak).
ADVICE = {
    "gpu": {
        "launch/host": "the host sets the pace: replay the step from a CUDA graph or "
        "torch.compile(mode='reduce-overhead'), remove synchronizations inside it, or give each launch more work "
        "(a larger batch)",
        "latency": "neither unit is near its peak while the device is busy: the kernels are small or serial; fuse "
        "them (torch.compile), batch more work per launch, or look at the top kernels' occupancy and stalls",
        "compute left": "little is left in the kernels: fewer FLOPs (a lower precision, less recomputation) or more "
        "devices",
        "compute": "compute-bound below the measured ceiling: the top GEMMs' tile shapes and precision are where the "
        "rest is",
        "memory": "move fewer bytes: fuse elementwise work, keep weights or the KV cache in a lower precision, or "
        "reuse each weight for more tokens (a larger batch)",
    },
    "cpu": {
        "launch/host": "Python and operator dispatch between the operators set the pace: fewer, larger operators "
        "(torch.compile fuses them), no per-step Python work or copies, or more work per call (a larger batch)",
        "latency": "neither matrix nor memory throughput is near its ceiling: the operators are small or serial; "
        "fuse them (torch.compile), give intra-op parallelism more work (a larger batch; torch.get_num_threads() "
        "threads), or profile the top operators",
        "compute left": "little is left in the operators: fewer FLOPs, or a precision the CPU multiplies natively "
        "(bf16 needs AMX or AVX-512 BF16, else float32 is often faster)",
        "compute": "compute-bound below the measured matmul ceiling: the top operators' shapes, dtype (one the CPU "
        "vectorises natively) and thread count are where the rest is",
        "memory": "move fewer bytes: fuse elementwise work (torch.compile), a lower precision for weights and the KV "
        "cache, or reuse each weight for more tokens (a larger batch)",
    },
}


def classify(row: pd.Series, device: str = "gpu") -> StageBound:
    """The bound of one stage (a row of stages.csv); ``device``: 'gpu' or 'cpu', which the advice is for."""
    advice = ADVICE["cpu" if device == "cpu" else "gpu"]
    unit = "device" if device != "cpu" else "CPU (its operators)"
    mem = "DRAM" if device != "cpu" else "memory"
    stage = str(row["stage"])
    busy, _ = _num(row, "busy_over_wall")
    if not math.isfinite(busy):
        return StageBound(stage, "unknown", "no busy time was measured for the stage", "")
    if busy < BUSY_FLOOR:
        return StageBound(
            stage,
            "launch/host",
            f"the {unit} is busy {busy:.0%} of the stage's wall time",
            advice["launch/host"],
        )
    compute, c_name = compute_use(row)
    memory, m_name = memory_use(row)
    if not (math.isfinite(compute) or math.isfinite(memory)):
        return StageBound(
            stage,
            "unknown",
            f"the {unit} is busy {busy:.0%} of wall, but neither FLOPs nor bytes were measured (times only)",
            "",
        )
    c, m = (x if math.isfinite(x) else 0.0 for x in (compute, memory))
    c_text = f"compute {c:.0%} of peak ({c_name})" if math.isfinite(compute) else "compute — (no FLOPs to rate)"
    m_text = f"{mem} {m:.0%} of peak ({m_name})" if math.isfinite(memory) else f"{mem} — (no bytes to rate)"
    used = f"{c_text}, {m_text}, busy {busy:.0%} of wall"
    if max(c, m) < NEAR_PEAK:
        return StageBound(
            stage,
            "latency",
            used,
            advice["latency"],
        )
    if c >= m:
        ceiling, _ = _num(row, "mfu_busy_ceiling")
        left = math.isfinite(ceiling) and ceiling >= LITTLE_LEFT
        return StageBound(
            stage,
            "compute",
            used + (f"; {ceiling:.0%} of the measured matmul ceiling" if math.isfinite(ceiling) else ""),
            advice["compute left"] if left else advice["compute"],
        )
    ceiling, _ = _num(row, "dram_bw_util_busy_ceiling")
    left = math.isfinite(ceiling) and ceiling >= LITTLE_LEFT
    return StageBound(
        stage,
        "memory",
        used + (f"; {ceiling:.0%} of the measured copy bandwidth" if math.isfinite(ceiling) else ""),
        advice["memory"] + ("; the bandwidth itself is nearly used up" if left else ""),
    )


def with_bounds(stages: pd.DataFrame, device: str = "gpu") -> pd.DataFrame:
    """``stages`` with ``bound`` and ``bound_why`` columns (``device``: 'gpu' or 'cpu')."""
    found = [classify(row, device) for _, row in stages.iterrows()]
    return stages.assign(bound=[b.bound for b in found], bound_why=[b.why for b in found])
