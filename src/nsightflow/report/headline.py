"""The headline of a run: per stage, its share of the wall time, what bounds it and why, its utilisation against named
peaks, its top kernels, and what to try next (nsightflow.analysis.bounds); and its one-line form for the index."""

from __future__ import annotations

import html
import math
import re
from typing import Any

import pandas as pd

from nsightflow import units
from nsightflow.analysis.bounds import classify, memory_use
from nsightflow.records import Peaks

_TEMPLATE = re.compile(r"[<(].*$")


def short_kernel(name: str) -> str:
    """A kernel's name without return type, namespaces, template and call arguments (the full name is on hover)."""
    text = str(name).removeprefix("void ").strip()
    base = _TEMPLATE.sub("", text).rsplit("::", 1)[-1].strip()  # the first '<' or '(' ends the name
    return base or str(name)[:60]


def _pct(x: object) -> str:
    return f"{float(x):.1%}" if isinstance(x, (int, float)) and math.isfinite(float(x)) else units.MISSING


def _top(kernels: pd.DataFrame, stage: str, n: int = 3) -> str:
    mine = kernels[kernels["stage"] == stage].sort_values("total_ns", ascending=False)
    total = float(mine["total_ns"].sum())
    if not len(mine) or total <= 0:
        return "–"
    return ", ".join(
        f"<span title='{html.escape(str(k))}'>{html.escape(short_kernel(k))}</span> {t / total:.0%}"
        for k, t in zip(mine["kernel"].head(n), mine["total_ns"].head(n), strict=True)
    )


def headline_rows(stages: pd.DataFrame, kernels: pd.DataFrame | None, device: str = "gpu") -> list[dict[str, Any]]:
    """One dict per stage: stage, share (of the run's wall time), bound, why, advice, mfu_wall, mfu_busy, memory
    (DRAM use on busy time, measured or from the operators' bytes), top (HTML)."""
    wall = (
        pd.to_numeric(stages["wall_ms"], errors="coerce") if "wall_ms" in stages else pd.Series(math.nan, stages.index)
    )
    total = float(wall.sum())
    rows = []
    for i, (_, row) in enumerate(stages.iterrows()):
        b = classify(row, device)
        memory, _ = memory_use(row)
        rows.append(
            {
                "stage": b.stage,
                "share": float(wall.iloc[i]) / total if total and math.isfinite(total) else math.nan,
                "bound": b.bound,
                "why": b.why,
                "advice": b.advice,
                "mfu_wall": row.get("mfu_wall"),
                "mfu_busy": row.get("mfu_busy"),
                "mfu_wall_datasheet": row.get("mfu_wall_datasheet"),
                "mfu_busy_datasheet": row.get("mfu_busy_datasheet"),
                "memory": memory,
                "peak_memory": _peak_memory(row),
                "top": _top(kernels, b.stage) if kernels is not None else "",
            }
        )
    return rows


def _peak_memory(row: pd.Series) -> float:
    """A stage's peak memory as the headline shows it: the device's allocated bytes, else the host process's."""
    for col in ("memory_allocated_peak", "memory_rss_peak"):
        v = row.get(col)
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            return float(v)
    return math.nan


def _model_memory(params: dict[str, Any] | None) -> str:
    """What the workload says its model holds (weights, KV cache), for the sentence under the headline."""
    said = [
        f"{label} {units.si(float((params or {})[key]), 'B')}"
        for key, label in (("weights_bytes", "weights"), ("kv_cache_bytes", "KV cache"))
        if isinstance((params or {}).get(key), (int, float))
    ]
    return f" The workload's model holds {', '.join(said)}." if said else ""


def headline_html(
    stages: pd.DataFrame, kernels: pd.DataFrame, pk: Peaks, device: str = "gpu", params: dict[str, Any] | None = None
) -> str:
    """The run page's headline: a short table, then one sentence per stage of what to try next (``device``: 'gpu' or
    'cpu', what ran the stages; ``params``: the workload's, for its model's memory)."""
    rows = headline_rows(stages, kernels, device)
    mem, what = ("memory", "operators") if device == "cpu" else ("DRAM", "kernels")
    if not rows:
        return ""
    compute = html.escape(f"{pk.precision} peak, {pk.compute_source}") if pk.compute_source else "no compute peak"
    memory = html.escape(pk.dram_source) if pk.dram_source else "no bandwidth peak"
    sheet = pk.datasheet_compute is not None and math.isfinite(pk.datasheet_compute)
    head = (
        "<tr><th>stage</th><th>share of wall</th><th>bound</th><th>MFU on wall / busy</th>"
        + ("<th>MFU vs datasheet, wall / busy</th>" if sheet else "")
        + f"<th>{mem} use on busy</th><th>peak memory</th><th>top {what} (share of busy time)</th></tr>"
    )
    body = "".join(
        f"<tr><td>{html.escape(r['stage'])}</td><td class='num'>{_pct(r['share'])}</td>"
        f"<td title='{html.escape(r['why'])}'><b>{html.escape(r['bound'])}</b></td>"
        f"<td class='num'>{_pct(r['mfu_wall'])} / {_pct(r['mfu_busy'])}</td>"
        + (f"<td class='num'>{_pct(r['mfu_wall_datasheet'])} / {_pct(r['mfu_busy_datasheet'])}</td>" if sheet else "")
        + f"<td class='num'>{_pct(r['memory'])}</td><td class='num'>{units.si(r['peak_memory'], 'B')}</td>"
        f"<td>{r['top']}</td></tr>"
        for r in rows
    )
    published = (
        f" MFU vs datasheet divides by {units.si(pk.datasheet_compute, 'FLOP/s')}, the dense {pk.precision} peak of "
        f"the {html.escape(str(pk.datasheet_source))}: the figure Megatron-LM, torchtitan and the Llama 3 paper use, "
        "so compare published MFU with it."
        if sheet
        else ""
    )
    which = "device memory allocated" if device != "cpu" else "the process's resident memory"
    advice = "".join(
        f"<li><b>{html.escape(r['stage'])}</b> ({html.escape(r['bound'])}: {html.escape(r['why'])}): "
        f"{html.escape(r['advice'])}</li>"
        for r in rows
        if r["advice"] or r["bound"] == "unknown"
    )
    return (
        f"<div class='headline'><h3>Headline</h3><table class='headline'>{head}{body}</table>"
        f"<p class='peaks'>MFU against the {compute}; {mem} against {memory}.{published} Peak memory: {which} "
        f"at its most during a step (the timed run).{html.escape(_model_memory(params))}</p>"
        f"<ul class='advice'>{advice}</ul></div>"
    )


def headline_line(run_id: str, stages: pd.DataFrame, device: str = "gpu") -> str:
    """The index's one line for a run: each stage's share of wall, bound and MFU on busy time."""
    parts = [
        f"{html.escape(r['stage'])} {_pct(r['share'])} of wall, <b>{html.escape(r['bound'])}</b>"
        f"<span title='{html.escape(r['why'])}'> (MFU on busy {_pct(r['mfu_busy'])})</span>"
        for r in headline_rows(stages, None, device)
    ]
    return f"<li><a href='{html.escape(run_id)}/report.html'>{html.escape(run_id)}</a>: " + "; ".join(parts) + "</li>"
