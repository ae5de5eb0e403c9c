"""What a stage's model count leaves out: operators with no FLOP formula, found two ways. The counting pass lists
those named like matrix work (nsightflow.formulas.matrix_like: a custom ``fused_mm``); ncu's counters find
the rest, whatever their names: an operator the count gave no FLOPs whose kernels executed tensor-core FLOPs. MFU
keeps the counted part; these columns and the stage's note say what it leaves out and its share of the executed
tensor FLOPs, so a 10x gap is never explained as padding."""

from __future__ import annotations

from typing import Any

import numpy as np

from nsightflow import units
from nsightflow.records import StageCount

# An operator's kernels under this share of the stage's executed tensor FLOPs are not named (a cast that ran on a
# tensor pipe): below it the count's gap is inside any measurement's noise.
MATERIAL = 0.001


def short(label: str) -> str:
    """An operator's name without its namespace (``aten.mm`` → ``mm``), as the timeline's class keys carry it."""
    return label.rsplit(".", 1)[-1]


def not_counted(an: StageCount, tensor_by_op: dict[str, float] | None, tensor_total: float) -> dict[str, Any]:
    """A stage's ``flops_not_counted`` (tensor FLOPs that kernels of operators without a formula executed; NaN with
    no counters) and ``not_counted_ops`` (each such operator with its calls and executed FLOPs, '' for none).

    ``tensor_by_op``: measured tensor FLOPs per operator name (nsightflow.analysis.metrics.stage_measured); empty or
    None where no counter exists (the torch backend), where only the count's own list is said."""
    counted = {short(label) for label, f in an.by_op.items() if f}  # operators the count gave FLOPs
    executed = {op: float(f) for op, f in (tensor_by_op or {}).items() if op and op not in counted and f > 0}
    named = {short(label): (label, calls) for label, calls in an.no_formula.items()}
    listed = set(named) | {op for op, f in executed.items() if f > MATERIAL * tensor_total}
    parts = []
    for op in sorted(listed, key=lambda o: (-executed.get(o, 0.0), o)):
        label, calls = named.get(op, (op, None))
        said = [f"{calls} calls"] if calls is not None else []
        if op in executed:
            said.append(f"{units.si(executed[op], 'FLOP')} executed")
        parts.append(f"{label} ({', '.join(said)})" if said else label)
    has_counters = bool(tensor_by_op) and np.isfinite(tensor_total)
    return {
        "flops_not_counted": float(sum(executed.get(op, 0.0) for op in listed)) if has_counters else np.nan,
        "not_counted_ops": "; ".join(parts),
    }
