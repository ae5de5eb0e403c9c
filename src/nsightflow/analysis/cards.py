"""A card per top kernel class: what limits the kernel and by how much, from ncu's own sections (speed of light,
occupancy, warp states, memory workload, launch statistics) collected for those classes only (the deep-dive
capture: nsightflow.capture.read.deep), with ncu's own rule messages."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from nsightflow import files

SOL_COMPUTE = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
SOL_MEMORY = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
SOL_DRAM = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
OCCUPANCY_MAX = "sm__maximum_warps_per_active_cycle_pct"
WAVES = "launch__waves_per_multiprocessor"
LIMITS = "launch__occupancy_limit_"
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
HEADER = re.compile(r"^  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+")
RULE = re.compile(r"^    (OPT|WRN)\s+(.*\S)\s*$")


@dataclass(frozen=True)
class Card:
    """One profiled launch of a top class: its limits in ncu's words and numbers (percentages of peak)."""

    stage: str
    kernel: str
    class_key: str
    limiter: str  # compute, memory, or latency (neither near its peak)
    sol_compute_pct: float
    sol_memory_pct: float
    sol_dram_pct: float
    occupancy_pct: float
    occupancy_max_pct: float
    occupancy_limited_by: str  # registers, shared memory, warps, blocks, barriers
    waves: float
    stalls: list[tuple[str, float]] = field(default_factory=list)  # top reasons: cycles per issued instruction
    rules: list[str] = field(default_factory=list)  # ncu's OPT and WRN messages


def _num(row: pd.Series, name: str) -> float:
    v = row.get(name, math.nan)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def detail_rules(details: str) -> list[list[str]]:
    """ncu's rule messages (OPT, WRN) per result, in the order of the details page (``--page details``)."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for line in details.splitlines():
        if HEADER.match(line):
            out.append([])
            current = None
            continue
        m = RULE.match(line)
        if m and out:
            if "could not be found" in m.group(2):  # the profiler's own metric list, not the kernel
                current = None
                continue
            out[-1].append(f"{m.group(1)}: {m.group(2)}")
            current = out[-1]
        elif current is not None and line.startswith(" " * 10) and line.strip():
            current[-1] += " " + line.strip()
        elif not line.strip() or line.strip().startswith("---"):
            current = None
    return out


def card(row: pd.Series, rules: list[str], near: float = 60.0) -> Card:
    """One launch's card from its raw-export row (metric columns) and its rule messages."""
    compute, memory = _num(row, SOL_COMPUTE), _num(row, SOL_MEMORY)
    limiter = "latency"
    if max(compute, memory) >= near:
        limiter = "compute" if compute >= memory else "memory"
    limits = {c[len(LIMITS) :]: _num(row, c) for c in row.index if str(c).startswith(LIMITS)}
    limited = min(limits, key=lambda k: limits[k]) if limits else ""
    stalls = [(m.group(1), _num(row, c)) for c in row.index if (m := STALL.match(str(c))) and m.group(1) != "selected"]
    stalls = sorted((s for s in stalls if math.isfinite(s[1]) and s[1] > 0), key=lambda s: -s[1])[:3]
    return Card(
        stage=str(row.get("stage", "")),
        kernel=str(row.get("kernel", row.get("ncu_kernel", ""))),
        class_key=str(row.get("class_key", "")),
        limiter=limiter,
        sol_compute_pct=compute,
        sol_memory_pct=memory,
        sol_dram_pct=_num(row, SOL_DRAM),
        occupancy_pct=_num(row, OCCUPANCY),
        occupancy_max_pct=_num(row, OCCUPANCY_MAX),
        occupancy_limited_by=limited.replace("_", " "),
        waves=_num(row, WAVES),
        stalls=stalls,
        rules=rules,
    )


def cards(results: pd.DataFrame, details: str) -> list[Card]:
    """A card per result (rows of a raw export, in ncu ID order, joined to the plan where ``role`` says which are the
    deep dive's own: the others share their operator's window)."""
    rules = detail_rules(details)
    if len(rules) != len(results):
        rules = [[] for _ in range(len(results))]  # a details page of another capture: numbers only
    mine = results.reset_index(drop=True)
    keep = mine["role"] == "deep" if "role" in mine.columns else pd.Series(True, index=mine.index)
    return [card(mine.loc[i], rules[i]) for i in mine.index if keep[i]]


def write_cards(found: list[Card], path: str | Path) -> None:
    files.write_json(path, {"schema": 1, "cards": [asdict(c) for c in found]})


def read_cards(path: str | Path) -> list[Card]:
    from nsightflow.records import load_object

    data = load_object(path, "kernel cards (cards.json)")
    return [Card(**{**c, "stalls": [tuple(s) for s in c["stalls"]]}) for c in data.get("cards", [])]


def plan_cards(csv_path: str | Path, plan_json: str | Path, details_path: str | Path) -> list[Card]:
    """The cards of a deep-dive capture: its raw export joined to its plan (every result checked against the
    planned launch), the top classes' own launches carded, with their rule messages from the details page."""
    from nsightflow.capture.read import ncu_csv
    from nsightflow.capture.read.matching import match_to_plan
    from nsightflow.capture.read.plan import CapturePlan, expected_frame

    raw, _ = ncu_csv.parse_raw_csv(Path(csv_path).read_text(), str(csv_path))
    plan = CapturePlan.read(plan_json)
    matched = match_to_plan(ncu_csv.result_metrics(raw), expected_frame(plan), Path(csv_path).name)
    joined = raw.assign(
        **{
            col: matched.set_index("ncu_id")[col].reindex(raw["ID"]).to_numpy()
            for col in ("stage", "class_key", "kernel", "role")
        }
    )
    return cards(joined.sort_values("ID", kind="stable"), Path(details_path).read_text())
