"""Cards for the top kernel classes (nsightflow.analysis.cards, nsightflow.capture.read.deep): ncu's sections recorded
on an H100 (tests/data/h100_sections) read into cards whose numbers are the export's cells, and the deep-dive plan cut
from the committed H200 plan of the default decoder."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
from conftest import DATA

from nsightflow.analysis.cards import cards, detail_rules
from nsightflow.capture.read import ncu_csv
from nsightflow.capture.read.attribution import read_timeline
from nsightflow.capture.read.deep import deep_plan
from nsightflow.capture.read.plan import CapturePlan

SECTIONS = DATA / "h100_sections"
V3 = DATA / "h200_v3" / "default"


@pytest.fixture(scope="module")
def recorded():
    raw, _ = ncu_csv.parse_raw_csv((SECTIONS / "raw.csv").read_text())
    return raw, cards(raw, (SECTIONS / "details.txt").read_text())


def test_a_card_holds_the_exports_own_cells(recorded):
    raw, found = recorded
    rows = list(csv.DictReader((SECTIONS / "raw.csv").open()))[1:]  # the units row skipped
    assert len(found) == len(rows) == 6
    for c, row in zip(found, rows, strict=True):
        assert c.sol_compute_pct == float(row["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
        assert c.sol_memory_pct == float(row["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"])
        assert c.occupancy_pct == float(row["sm__warps_active.avg.pct_of_peak_sustained_active"])
        limits = {k: float(v) for k, v in row.items() if k.startswith("launch__occupancy_limit_")}
        assert c.occupancy_limited_by == min(limits, key=limits.get).removeprefix("launch__occupancy_limit_").replace(
            "_", " "
        )
        stalls = {
            k.removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio"): float(v)
            for k, v in row.items()
            if k.startswith("smsp__average_warps_issue_stalled_") and k.endswith("_per_issue_active.ratio")
        }
        stalls.pop("selected")
        assert [s for s, _ in c.stalls] == sorted(stalls, key=lambda s: -stalls[s])[:3]
        # small elementwise kernels: neither unit near its peak
        assert c.limiter == "latency" and max(c.sol_compute_pct, c.sol_memory_pct) < 60


def test_ncus_rule_messages_are_kept_per_kernel(recorded):
    _, found = recorded
    text = (SECTIONS / "details.txt").read_text()
    assert len(detail_rules(text)) == 6
    assert found[0].rules[0].startswith("OPT: This kernel grid is too small to fill the available resources")
    assert "0.1 full waves across all SMs" in found[0].rules[0]  # its continuation line joined
    assert any("Est. Local Speedup: 54.25%" in r for r in found[0].rules)
    assert not any("could not be found" in r for c in found for r in c.rules)


def test_the_deep_plan_keeps_the_windows_of_the_top_classes(tmp_path):
    plan = CapturePlan.read(V3 / "plan.json")
    deep = deep_plan(V3 / "plan.json", V3 / "timeline.sqlite", "nsightflow", 3, tmp_path / "deep.plan.json")
    ranged = read_timeline(V3 / "timeline.sqlite", "nsightflow").launches
    ranged = ranged[ranged["pass_"] == "ranged"]
    for stage in ("prefill", "decode"):
        top = ranged[ranged["stage"] == stage].groupby("class_key")["duration_ns"].sum().nlargest(3).index
        mine = [e for e in deep.expected if e.stage == stage and e.role == "deep"]
        assert sorted(e.class_key for e in mine) == sorted(top)
    # every planned launch of a kept window is kept (ncu profiles the whole operator), nothing else
    kept = {(w.stage, w.step, u) for w in deep.windows for u in w.units or []}
    want = [replace(e, role="") for e in plan.expected if (e.stage, e.step, e.unit) in kept]
    assert [replace(e, role="") for e in deep.expected] == want
    assert len(deep.expected) < len(plan.expected)
