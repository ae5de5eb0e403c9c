"""torch.profiler (Kineto) traces as the same tables the nsys path produces.

The harness's ``--mode torch`` runs each stage step inside ``record_function('domain:stage')``
and exports a Chrome/Perfetto JSON trace. From it:
- ``stage_table``: wall time and instances per annotated range (as ``nsys_stats.stage_table``);
- ``kernel_table``: time and instances per (stage, kernel) as ``nsys_stats.kernel_table``. On a GPU the
  rows are CUDA kernels (CUPTI), attributed to the range whose CPU interval holds their launch on
  the same thread; on a CPU they are operators, timed by self time (an operator's time minus its
  children's), so nested operators are not counted twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsightflow.capture.read.nsys_stats import split_range
from nsightflow.errors import InputError

KERNEL_CATEGORIES = ("kernel",)
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def load_trace(path: str | Path) -> dict[str, Any]:
    """The trace's JSON, with a clear error when it is not a torch.profiler Chrome trace."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path}: not a readable JSON trace ({exc}); export one with "
            "torch.profiler.profile(...).export_chrome_trace(PATH)"
        ) from exc
    if not isinstance(data, dict) or "traceEvents" not in data:
        raise InputError(f"{path}: JSON without 'traceEvents': not a torch.profiler Chrome trace")
    return data


def _complete_events(trace: dict[str, Any]) -> pd.DataFrame:
    rows = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    df = pd.DataFrame(
        {
            "cat": [e.get("cat", "") for e in rows],
            "name": [str(e.get("name", "")) for e in rows],
            "ts": [float(e["ts"]) for e in rows],
            "dur": [float(e["dur"]) for e in rows],
            "tid": [str(e.get("tid")) for e in rows],
            "pid": [str(e.get("pid")) for e in rows],
            "correlation": [(e.get("args") or {}).get("correlation") for e in rows],
        }
    )
    df["end"] = df["ts"] + df["dur"]
    return df


def ranges(trace: dict[str, Any], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Annotated ranges (``record_function``), in start order: domain, stage, ts, end, tid, range_index.

    ``labels`` maps trace labels back to stage names (see nsightflow.capture.inside.harness.trace_label); when given,
    annotations that are not the harness's are left out.
    """
    ev = _complete_events(trace)
    ann = ev[ev["cat"] == "user_annotation"].sort_values("ts").copy()
    parts = ann["name"].map(split_range)
    ann["domain"] = [p[0] for p in parts]
    if labels:
        # Only the harness's ranges are stages: libraries annotate their own calls too
        # (torch.optim: "Optimizer.step#AdamW.step").
        mine = [bool(d) and lab in labels for d, lab in parts]
        ann, parts = ann[mine], parts[mine]
    ann["stage"] = [(labels or {}).get(p[1], p[1]) for p in parts]
    ann["range_index"] = ann.groupby(["domain", "stage"]).cumcount()
    return ann.reset_index(drop=True)


class _Owners:
    """Find the innermost annotated range on a thread that holds a time stamp."""

    def __init__(self, rng: pd.DataFrame) -> None:
        self.by_tid = {
            tid: (g["ts"].to_numpy(), g["end"].to_numpy(), g.index.to_numpy())
            for tid, g in rng.sort_values("ts").groupby("tid")
        }

    def __call__(self, ts: float, tid: str) -> int | None:
        if tid not in self.by_tid:
            return None
        starts, ends, idx = self.by_tid[tid]
        i = int(np.searchsorted(starts, ts, side="right")) - 1
        while i >= 0:  # the latest-starting range that still holds ts is the innermost
            if ends[i] >= ts:
                return int(idx[i])
            i -= 1
        return None


def _self_times(ops: pd.DataFrame) -> pd.Series:
    """Each operator's duration minus its direct children's, per thread (events nest properly)."""
    self_t = ops["dur"].copy()
    for _, g in ops.sort_values(["ts", "dur"], ascending=[True, False]).groupby("tid"):
        stack: list[tuple[int, float]] = []
        for idx, ts, end in zip(g.index, g["ts"], g["end"], strict=True):
            while stack and stack[-1][1] <= ts:
                stack.pop()
            if stack:
                self_t[stack[-1][0]] -= min(end, stack[-1][1]) - ts
            stack.append((idx, end))
    return self_t.clip(lower=0)


def activity(trace: dict[str, Any], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Every kernel (GPU) or operator (CPU) inside an annotated range: domain, stage, range_index, kernel, ns."""
    ev = _complete_events(trace)
    rng = ranges(trace, labels)
    kernels = ev[ev["cat"].isin(KERNEL_CATEGORIES)]
    owner_of = _Owners(rng)
    rows = []
    if not kernels.empty:
        launches = ev[ev["cat"].isin(LAUNCH_CATEGORIES) & ev["correlation"].notna()]
        by_corr = {
            c: (ts, tid) for c, ts, tid in zip(launches["correlation"], launches["ts"], launches["tid"], strict=True)
        }
        for name, dur, corr in zip(kernels["name"], kernels["dur"], kernels["correlation"], strict=True):
            if corr not in by_corr:
                continue
            owner = owner_of(*by_corr[corr])
            if owner is not None:
                rows.append((owner, name, dur))
    else:
        ops = ev[ev["cat"] == "cpu_op"].copy()
        ops["self"] = _self_times(ops)
        for name, ts, tid, self_us in zip(ops["name"], ops["ts"], ops["tid"], ops["self"], strict=True):
            owner = owner_of(ts, tid)
            if owner is not None:
                rows.append((owner, name, self_us))
    out = pd.DataFrame(rows, columns=["owner", "kernel", "dur_us"])
    out["domain"] = rng.loc[out["owner"], "domain"].values if len(out) else []
    out["stage"] = rng.loc[out["owner"], "stage"].values if len(out) else []
    out["range_index"] = rng.loc[out["owner"], "range_index"].values if len(out) else []
    out["duration_ns"] = out["dur_us"] * 1e3
    return out[["domain", "stage", "range_index", "kernel", "duration_ns"]]


def device_kind(trace: dict[str, Any]) -> str:
    """'gpu' when the trace holds CUDA kernels, else 'cpu' (operators)."""
    return "gpu" if any(e.get("cat") in KERNEL_CATEGORIES for e in trace["traceEvents"]) else "cpu"


def kernel_table(trace: dict[str, Any], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Time per (stage, kernel or operator), columns as ``nsys_stats.kernel_table``."""
    act = activity(trace, labels)
    n_ranges = ranges(trace, labels).groupby(["domain", "stage"]).size().rename("range_instances").reset_index()
    out = act.groupby(["domain", "stage", "kernel"], as_index=False).agg(
        instances=("duration_ns", "size"), total_ns=("duration_ns", "sum")
    )
    out = out.merge(n_ranges, on=["domain", "stage"], how="left")
    out["launches_per_range"] = out["instances"] / out["range_instances"]
    return out.sort_values(["stage", "total_ns"], ascending=[True, False], ignore_index=True)


def stage_table(trace: dict[str, Any], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Wall time per annotated range, in the order the stages first ran; columns as ``nsys_stats.stage_table``."""
    rng = ranges(trace, labels)
    out = rng.groupby(["domain", "stage"], as_index=False, sort=False).agg(
        range_instances=("dur", "size"), wall_us=("dur", "sum")
    )
    out["wall_ns"] = out.pop("wall_us") * 1e3
    return out


GROUPED_OPS = ("aten::_grouped_mm", "aten::_scaled_grouped_mm")


def expert_time(trace: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, float]:
    """Per stage, the time of its grouped GEMMs (an MoE's experts) on a CPU: each operator's whole duration, its
    children's included (on a CPU the operator's work runs in children the kernel table times apart); nothing on a
    GPU, whose kernels this trace does not tie to operators."""
    if device_kind(trace) == "gpu":
        return {}
    ev = _complete_events(trace)
    ops = ev[(ev["cat"] == "cpu_op") & ev["name"].isin(GROUPED_OPS)]
    rng = ranges(trace, labels)
    owner_of = _Owners(rng)
    out: dict[str, float] = {}
    for ts, tid, dur in zip(ops["ts"], ops["tid"], ops["dur"], strict=True):
        owner = owner_of(ts, tid)
        if owner is not None:
            stage = str(rng.loc[owner, "stage"])
            out[stage] = out.get(stage, 0.0) + dur * 1e3
    return out
