"""A mixture of experts, measured: how its router spread tokens over the experts (from the grouped GEMMs' offsets in
the counting pass: tokens per expert per routing and step) and what its expert GEMMs cost (their kernels' time, share
of the stage and FLOP rate). ``experts.csv`` holds the routing, a row per (stage, step, routing); the stage table
the cost. A routing is one offsets tensor shared by consecutive grouped GEMMs: an MoE layer of a forward pass (its
gate/up and down projections), or of a backward pass (their gradients)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsightflow import columns
from nsightflow.records import StageCount

COLUMNS = columns.names("experts")


def routing_table(analytic: dict[str, StageCount]) -> pd.DataFrame:
    """Per stage, step and routing: the experts, the tokens routed (each token once per expert it went to), the
    most, mean and fewest an expert got, the experts that got none, the imbalance (most over mean: the busiest
    expert's GEMM sets the pace of a grouped GEMM), and every expert's tokens (space-separated)."""
    rows = []
    for stage, count in analytic.items():
        for step, routings in enumerate(count.routing):
            for layer, tokens in enumerate(routings):
                t = np.asarray(tokens, dtype=float)
                mean = float(t.mean()) if len(t) else np.nan
                rows.append(
                    {
                        "stage": stage,
                        "step": step,
                        "layer": layer,
                        "experts": len(t),
                        "tokens": int(t.sum()),
                        "tokens_max": int(t.max()) if len(t) else 0,
                        "tokens_mean": mean,
                        "tokens_min": int(t.min()) if len(t) else 0,
                        "idle_experts": int((t == 0).sum()),
                        "imbalance": float(t.max()) / mean if mean > 0 else np.nan,
                        "tokens_per_expert": " ".join(str(int(x)) for x in t),
                    }
                )
    return pd.DataFrame(rows, columns=COLUMNS)


def expert_columns(
    an: StageCount, expert_ns: float, expert_flops: float, busy_ns: float, model: bool = False
) -> dict[str, Any]:
    """A stage's ``expert_gemm_ms`` (its grouped GEMMs' kernel time, or operator time on a CPU), their share of its
    busy time, their FLOP rate (measured tensor FLOPs over their time; with ``model``, where no counter exists, the
    count's FLOPs of those operators), and the mean imbalance of its routings; NaN for a stage without experts."""
    routed = [max(t) / (sum(t) / len(t)) for step in an.routing for t in step if t and sum(t) > 0]
    flops = expert_flops
    if model and not np.isfinite(flops):
        flops = float(
            sum(f for label, f in an.by_op.items() if label.endswith(("._grouped_mm", "._scaled_grouped_mm")))
        )
    has = np.isfinite(expert_ns) and expert_ns > 0
    return {
        "expert_gemm_ms": expert_ns / 1e6 if has else np.nan,
        # (a part of the busy time: an operator's whole duration and its children's self times, summed apart, can
        # differ by the trace's timestamp rounding)
        "expert_gemm_share": min(1.0, expert_ns / busy_ns) if has and busy_ns > 0 else np.nan,
        "expert_gemm_flop_rate": flops / (expert_ns * 1e-9) if has and np.isfinite(flops) and flops > 0 else np.nan,
        "expert_imbalance": float(np.mean(routed)) if routed else np.nan,
    }
