"""The run page's cards for the top kernel classes (nsightflow.analysis.cards): what limits each, by how much, and
ncu's own advice."""

from __future__ import annotations

import html
import math

from nsightflow import units
from nsightflow.analysis.cards import Card
from nsightflow.report.headline import short_kernel


def _pct(v: float) -> str:
    return f"{v:.1f}%" if math.isfinite(v) else units.MISSING


def card_html(c: Card) -> str:
    stalls = ", ".join(f"{html.escape(r.replace('_', ' '))} {v:.1f}" for r, v in c.stalls) or "—"
    rules = "".join(f"<li>{html.escape(r)}</li>" for r in c.rules)
    occupancy = f"{_pct(c.occupancy_pct)} achieved of {_pct(c.occupancy_max_pct)} possible"
    if c.occupancy_limited_by:
        occupancy += f" (limited by {html.escape(c.occupancy_limited_by)})"
    waves = f"{c.waves:.2f}" if math.isfinite(c.waves) else units.MISSING
    return (
        f"<div class='card'><h4>{html.escape(c.stage)}: <span title='{html.escape(c.kernel, quote=True)}'>"
        f"{html.escape(short_kernel(c.kernel))}</span> — <b>{html.escape(c.limiter)}</b></h4><ul>"
        f"<li>speed of light: compute {_pct(c.sol_compute_pct)}, memory {_pct(c.sol_memory_pct)}, DRAM "
        f"{_pct(c.sol_dram_pct)} of peak</li><li>occupancy: {occupancy}; waves per SM {waves}</li>"
        f"<li>top stalls (cycles per issued instruction): {stalls}</li></ul>"
        + (f"<details><summary>ncu's advice ({len(c.rules)})</summary><ul>{rules}</ul></details>" if rules else "")
        + "</div>"
    )


def cards_html(cards: list[Card]) -> str:
    """The deep-dive section: a card per top class, or nothing when the run has no deep-dive capture."""
    if not cards:
        return ""
    return (
        "<h3>Top kernel classes, in depth (ncu sections)</h3><div class='cards'>"
        + "".join(card_html(c) for c in cards)
        + "</div>"
    )
