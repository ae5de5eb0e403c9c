"""The deep-dive capture's plan: the run's capture plan cut down to the windows holding the top kernel classes of
each stage (by GPU time in the timeline), so that ncu's costly sections (speed of light, occupancy, warp states,
memory workload) run on a few launches only. The launches sharing those windows are planned too (a window profiles
its whole operator); the top classes' own are marked ``role: deep``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nsightflow.capture.read.attribution import read_timeline
from nsightflow.capture.read.plan import CapturePlan, Window


def deep_plan(plan_json: str | Path, sqlite: str | Path, domain: str, top: int, out: str | Path) -> CapturePlan:
    """The windows and expected launches of ``plan_json`` that hold the ``top`` classes of each stage by GPU time."""
    plan = CapturePlan.read(plan_json)
    tl = read_timeline(sqlite, domain)
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    time = ranged.groupby(["stage", "class_key"])["duration_ns"].sum().sort_values(ascending=False)
    chosen_pairs = {
        (stage, key) for stage in time.index.get_level_values(0).unique() for key in time[stage].index[:top]
    }
    first = {}  # the planned launch of each chosen class (its representative: profiled once)
    for i, e in enumerate(plan.expected):
        if (e.stage, e.class_key) in chosen_pairs and (e.stage, e.class_key) not in first:
            first[(e.stage, e.class_key)] = i
    whole = {(w.stage, w.step) for w in plan.windows if w.units is None}
    units: dict[tuple[str, int], set[int]] = {}
    for i in first.values():
        e = plan.expected[i]
        units.setdefault((e.stage, e.step), set()).add(e.unit)
    windows = [
        Window(stage, step, None if (stage, step) in whole else sorted(u), "holds a top class (deep dive)")
        for (stage, step), u in units.items()
    ]
    deep = set(first.values())
    expected = []
    for i, e in enumerate(plan.expected):
        key = (e.stage, e.step)
        if key in units and (key in whole or e.unit in units[key]):
            expected.append(replace(e, role="deep" if i in deep else "context"))
    order = {(w.stage, w.step): n for n, w in enumerate(plan.windows)}
    windows.sort(key=lambda w: order.get((w.stage, w.step), 0))
    cut = CapturePlan(plan.mode, plan.domain, windows, expected, plan.stages)
    cut.write(out)
    return cut
