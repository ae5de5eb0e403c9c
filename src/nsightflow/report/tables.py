"""The report's HTML tables: every cell formatted by its column's kind (nsightflow.columns), escaped, never "nan"."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from nsightflow import units
from nsightflow.report.glossary import TIPS
from nsightflow.report.headline import short_kernel

FORMATS: dict[str, Callable[[Any], str]] = {
    "text": str,
    "count": units.count,
    "ms": units.ms,
    "ns_as_ms": lambda v: units.ms(v / 1e6),
    "flop": lambda v: units.si(v, "FLOP"),
    "bytes": lambda v: units.si(v, "B"),
    "pct": units.percent,
    "flop_rate": lambda v: units.si(v, "FLOP/s"),
    "byte_rate": lambda v: units.si(v, "B/s"),
    "intensity": lambda v: units.sig(v) if units.finite(v) else units.MISSING,
    "bool": lambda v: "yes" if v is True or v == 1 else "",
}


def cell(v: Any, kind: str) -> str:
    """One table cell's text: a value of a column's kind, or the missing mark (never "nan")."""
    if kind != "text" and kind != "bool" and not units.finite(v):
        return units.MISSING
    if kind == "text" and (v is None or (isinstance(v, float) and math.isnan(v))):
        return units.MISSING
    return FORMATS[kind](v)


def _shown(df: pd.DataFrame, c: str, kind: str) -> bool:
    """A column is shown when it has something to say: some value, and for flags some flag set."""
    if c not in df.columns or df[c].isna().all():
        return False
    return kind != "bool" or bool(df[c].fillna(False).astype(bool).any())


def _td_class(c: str, kind: str) -> str:
    """Long names (kernels, run ids) wrap; other labels stay on one line."""
    if kind != "text":
        return ""
    return " class=name" if c in ("kernel", "run") else " class=label"


def table(
    df: pd.DataFrame,
    columns: dict[str, tuple[str, str]],
    cls: str = "",
    first: frozenset[str] | None = None,
    tips: dict[str, str] | None = None,
) -> str:
    """An HTML table of ``columns`` (source -> (header, kind)); every cell formatted by its kind and
    HTML-escaped (C++ templates); headers carry their definition (nsightflow.columns) as a tooltip. With ``first``,
    the other columns are hidden until the reader asks for every column (a checkbox before the table). Kernel names
    are shortened, the full name on hover."""
    cols = [c for c, (_, kind) in columns.items() if _shown(df, c, kind)]

    def more(c: str) -> str:
        return " more" if first is not None and c not in first else ""

    def th(c: str) -> str:
        tip = (TIPS if tips is None else tips).get(c)
        title = f' title="{html.escape(tip, quote=True)}"' if tip else ""
        klass = f" class='{more(c).strip()}'" if more(c) else ""
        return f"<th{klass}{title}>{html.escape(columns[c][0])}</th>"

    def td(c: str, v: Any) -> str:
        kind = columns[c][1]
        text = html.escape(cell(v, kind))
        if c == "kernel" and isinstance(v, str) and short_kernel(v) != v:
            text = f"<span title='{html.escape(v, quote=True)}'>{html.escape(short_kernel(v))}</span>"
        klass = (_td_class(c, kind).removeprefix(" class=") + more(c)).strip()
        return f"<td class='{klass}'>{text}</td>" if klass else f"<td>{text}</td>"

    body = "".join("<tr>" + "".join(td(c, r[c]) for c in cols) + "</tr>" for _, r in df.iterrows())
    out = (
        f"<table{f' class={cls}' if cls else ''}><thead><tr>{''.join(th(c) for c in cols)}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )
    if first is None or all(c in first for c in cols):
        return out
    box = f"cols-{abs(hash((cls, tuple(cols)))) % 10**8}"
    return (
        f"<div class='toggle'><input type='checkbox' id='{box}'><label for='{box}'> every column "
        f"({len(cols)})</label>{out}</div>"
    )
