"""A mixture of experts on the run page: per stage, how its router spread tokens (a heatmap of tokens per expert and
routing, the imbalance) and what its expert GEMMs cost (nsightflow.analysis.experts; every routing in experts.csv)."""

from __future__ import annotations

import base64
import html

import numpy as np
import pandas as pd

from nsightflow import columns, units
from nsightflow.report import charts
from nsightflow.report.tables import table

ROWS_SHOWN = 200  # routings listed on the page (experts.csv has them all)


def tokens_by_routing(rows: pd.DataFrame) -> pd.DataFrame:
    """One stage's tokens per expert per routing (rows) and expert (columns), averaged over its steps."""
    per = [list(map(int, str(t).split())) for t in rows["tokens_per_expert"]]
    width = max((len(p) for p in per), default=0)
    grid = pd.DataFrame([p + [0] * (width - len(p)) for p in per], index=rows["layer"].to_numpy())
    return grid.groupby(level=0).mean()


def experts_html(experts: pd.DataFrame | None, stages: pd.DataFrame) -> str:
    """The page's experts section; '' for a model without grouped GEMMs."""
    if experts is None or experts.empty:
        return ""
    parts = ["<h3>Experts (mixture of experts)</h3>"]
    by_stage = stages.set_index("stage") if "stage" in stages else pd.DataFrame()
    for stage, rows in experts.groupby("stage", sort=False):
        s = by_stage.loc[stage] if stage in by_stage.index else pd.Series(dtype=float)
        steps, routings = rows["step"].nunique(), rows["layer"].nunique()
        said = (
            f"<b>{html.escape(str(stage))}</b>: {routings} routing(s) a step over {steps} step(s), "
            f"{int(rows['experts'].max())} experts, {units.count(rows['tokens'].mean())} tokens routed per routing; "
            f"imbalance (busiest expert over the mean) {units.sig(float(rows['imbalance'].mean()))} on average, "
            f"{units.sig(float(rows['imbalance'].max()))} at most; {int(rows['idle_experts'].sum())} idle expert "
            "slot(s)"
        )
        ms, share, rate = (s.get(c, np.nan) for c in ("expert_gemm_ms", "expert_gemm_share", "expert_gemm_flop_rate"))
        if units.finite(ms):
            said += (
                f". Expert GEMMs: {units.ms(ms)} ms, {units.percent(share)} of the stage's busy time, at "
                f"{units.si(rate, 'FLOP/s')}"
            )
        grid = tokens_by_routing(rows)
        png = charts.experts_png(grid, f"{stage}: tokens per expert")
        parts.append(
            f"<p>{said}.</p><img alt='tokens per expert, {html.escape(str(stage))}' "
            f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        )
    cols = {c.name: (c.header, c.fmt) for c in columns.EXPERTS if c.shown}
    tips = {c.name: c.definition for c in columns.EXPERTS if c.definition}
    more = f" (the first {ROWS_SHOWN}; experts.csv has all {len(experts)})" if len(experts) > ROWS_SHOWN else ""
    parts.append(
        f"<details><summary>every routing{more}</summary>"
        + table(experts.head(ROWS_SHOWN), cols, cls="experts", tips=tips)
        + "</details>"
    )
    return "".join(parts)
