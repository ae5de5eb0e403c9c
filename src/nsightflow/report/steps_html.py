"""A command's steps on the run page: the steady steps grouped by batch mix (nsightflow.analysis.steps), so a serving
loop's prefill-heavy, mixed and decode-only iterations are read apart (every step is in steps.csv); and the numbers
the program printed of itself (nsightflow.capture.read.own_metrics), beside nsightflow's."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from nsightflow import columns, units
from nsightflow.analysis.steps import mix_table
from nsightflow.report.tables import table


def steps_html(steps: pd.DataFrame | None) -> str:
    """The page's steps section; '' where no step has a batch mix (no step_inputs, or a callable)."""
    if steps is None or steps.empty:
        return ""
    mixes = mix_table(steps)
    if mixes.empty:
        return ""
    return "<h3>Steps by batch mix (steady steps; steps.csv has every step)</h3>" + table(
        mixes,
        {c.name: (c.header, c.fmt) for c in columns.MIXES if c.shown},
        cls="steps",
        tips={c.name: c.definition for c in columns.MIXES if c.definition},
    )


def program_metrics_html(metrics: dict[str, Any] | None) -> str:
    """The program's own numbers (its clock, in its timed run), each a name and a number; '' where it printed none.
    Values that are not numbers (a list of request lengths) stay in manifest.json."""
    shown = {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not shown:
        return ""
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{units.sig(float(v))}</td></tr>" for k, v in shown.items())
    return (
        "<h3>The program's own numbers (its clock, in the timed run)</h3>"
        f"<table class=own><thead><tr><th>name</th><th>value</th></tr></thead><tbody>{rows}</tbody></table>"
    )
