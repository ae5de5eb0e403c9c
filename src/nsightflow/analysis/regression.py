"""A regression gate for CI: this config's runs against a baseline (a run, a saved folder of runs), stage by stage
(wall and busy time per step, model FLOPs and DRAM bytes per busy second) and kernel by kernel (time per step), each
change judged against a threshold from the config plus the noise the two runs' own step walls show. Pure functions
over the runs' tables; the check rule fails the workflow when a change is a regression (results/check.txt)."""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsightflow import files, units
from nsightflow.analysis.runfiles import read_table
from nsightflow.errors import InputError
from nsightflow.records import Manifest

RUN_FILES = ("stages.csv", "kernels.csv", "manifest.json", "summary.json")  # what a saved run keeps (the rest optional)
METRICS = ("wall", "busy", "mfu", "bandwidth")


@dataclass(frozen=True)
class Thresholds:
    """Config ``check``: how much each number may move beyond noise (shares), the noise's width (standard errors of
    the two runs' mean step wall), which kernels are checked (their share of the stage's busy time in the baseline),
    and per-stage overrides."""

    wall: float
    busy: float
    mfu: float
    bandwidth: float
    kernel_time: float
    kernel_share: float
    noise: float
    stages: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, check: dict[str, Any]) -> Thresholds:
        keys = ("wall", "busy", "mfu", "bandwidth", "kernel_time", "kernel_share", "noise")
        return cls(**{k: float(check[k]) for k in keys}, stages=dict(check.get("stages") or {}))

    def limit(self, stage: str, metric: str) -> float:
        return float(self.stages.get(stage, {}).get(metric, getattr(self, metric)))


@dataclass(frozen=True)
class RunNumbers:
    """What the gate reads of one run: its stage and kernel tables and each stage's step walls (the timed run)."""

    run_id: str
    folder: Path
    stages: pd.DataFrame
    kernels: pd.DataFrame
    walls: dict[str, list[float]]

    @classmethod
    def read(cls, run_id: str, folder: str | Path) -> RunNumbers:
        folder = Path(folder)
        missing = [f for f in RUN_FILES[:3] if not (folder / f).exists()]
        if missing:
            raise InputError(
                f"{folder}: not a run's folder (no {', '.join(missing)}); a baseline is a run id of this config, a "
                "folder saved by `snakemake --cores 1 baselines/NAME`, or one run's results/<run id> folder"
            )
        manifest = Manifest.read(folder / "manifest.json")
        return cls(
            run_id,
            folder,
            read_table(folder / "stages.csv"),
            read_table(folder / "kernels.csv"),
            dict(manifest.program_wall_s or {}),
        )


def _spread(walls: list[float]) -> float:
    """The relative standard error of a stage's mean step wall; 0 for a single step (no spread to measure)."""
    w = np.asarray(walls, dtype=float)
    if len(w) < 2 or not np.isfinite(w).all() or w.mean() <= 0:
        return 0.0
    return float(w.std(ddof=1) / w.mean() / math.sqrt(len(w)))


def _per_step(s: pd.Series) -> dict[str, float]:
    """A stage's numbers the gate compares: per step (runs may differ in steps) and per busy second."""
    steps = float(s.get("range_instances", np.nan)) or np.nan
    busy_s = float(s.get("gpu_busy_ms", np.nan)) * 1e-3
    model = s.get("flops_analytic_causal", np.nan)
    model = s.get("flops_analytic", np.nan) if not np.isfinite(model) else model
    moved = s.get("dram_bytes_measured", np.nan)
    moved = s.get("bytes_analytic", np.nan) if not np.isfinite(moved) else moved
    return {
        "wall": float(s.get("wall_ms", np.nan)) / steps,
        "busy": float(s.get("gpu_busy_ms", np.nan)) / steps,
        "mfu": float(model) / busy_s if busy_s > 0 else np.nan,
        "bandwidth": float(moved) / busy_s if busy_s > 0 else np.nan,
    }


WHAT = {
    "wall": ("wall per step", "ms", +1),
    "busy": ("busy per step", "ms", +1),
    "mfu": ("model FLOP/s on busy (MFU)", "FLOP/s", -1),
    "bandwidth": ("bytes/s on busy (bandwidth use)", "B/s", -1),
}


def _judge(change: float, allowed: float, worse: int) -> str:
    if not np.isfinite(change):
        return "not compared"
    if worse * change > allowed:
        return "regression"
    return "improved" if -worse * change > allowed else "pass"


def compare(current: RunNumbers, baseline: RunNumbers, th: Thresholds) -> pd.DataFrame:
    """One row per number compared: run, stage, what, baseline, current, change (current / baseline − 1), allowed
    (the threshold plus ``th.noise`` standard errors of the two runs' step walls), verdict (pass, regression,
    improved, not compared; a stage new or missing; a kernel added or removed). A regression or a missing stage
    fails the check."""
    rows: list[dict[str, Any]] = []
    base = baseline.stages.set_index("stage")
    mine = current.stages.set_index("stage")

    def row(stage: str, what: str, b: float, c: float, allowed: float, verdict: str) -> None:
        change = c / b - 1 if np.isfinite(b) and np.isfinite(c) and b > 0 else np.nan
        rows.append(
            {
                "run": current.run_id,
                "stage": stage,
                "what": what,
                "baseline": b,
                "current": c,
                "change": change,
                "allowed": allowed,
                "verdict": verdict,
            }
        )

    for stage in dict.fromkeys([*base.index, *mine.index]):
        if stage not in mine.index:
            row(stage, "stage", np.nan, np.nan, np.nan, "missing")
            continue
        if stage not in base.index:
            row(stage, "stage", np.nan, np.nan, np.nan, "new")
            continue
        noise = th.noise * math.hypot(_spread(current.walls.get(stage, [])), _spread(baseline.walls.get(stage, [])))
        b, c = _per_step(base.loc[stage]), _per_step(mine.loc[stage])
        for metric in METRICS:
            what, unit, worse = WHAT[metric]
            allowed = th.limit(stage, metric) + noise
            change = c[metric] / b[metric] - 1 if np.isfinite(b[metric]) and b[metric] > 0 else np.nan
            row(stage, f"{what} ({unit})", b[metric], c[metric], allowed, _judge(change, allowed, worse))
        rows += _kernel_rows(current, baseline, stage, th, noise)
    return pd.DataFrame(rows, columns=["run", "stage", "what", "baseline", "current", "change", "allowed", "verdict"])


def _kernel_rows(
    current: RunNumbers, baseline: RunNumbers, stage: str, th: Thresholds, noise: float
) -> list[dict[str, Any]]:
    """The stage's kernels (operators on a CPU) that took at least ``th.kernel_share`` of its busy time in the
    baseline: their time per step ("removed" where the run has none: fused or replaced, which the stage's own times
    judge); and those new in the run that take that share of it ("added")."""

    def per_step(k: pd.DataFrame) -> pd.Series:
        mine = k[k["stage"] == stage]
        steps = mine["range_instances"].astype(float).replace(0, np.nan)
        return (mine["total_ns"].astype(float) / steps / 1e6).groupby(mine["kernel"]).sum()

    b, c = per_step(baseline.kernels), per_step(current.kernels)
    if b.empty or b.sum() <= 0:
        return []
    allowed = th.limit(stage, "kernel_time") + noise
    out = []
    for kernel, before in b[b >= th.kernel_share * b.sum()].sort_values(ascending=False).items():
        after = float(c.get(kernel, 0.0))
        change = after / before - 1
        out.append(
            {
                "run": current.run_id,
                "stage": stage,
                "what": f"kernel {kernel} per step (ms)",
                "baseline": float(before),
                "current": after,
                "change": change,
                "allowed": allowed,
                "verdict": "removed" if kernel not in c.index else _judge(change, allowed, +1),
            }
        )
    for kernel, after in c[(c >= th.kernel_share * c.sum()) & ~c.index.isin(b.index)].items():
        out.append(
            {
                "run": current.run_id,
                "stage": stage,
                "what": f"kernel {kernel} per step (ms)",
                "baseline": np.nan,
                "current": float(after),
                "change": np.nan,
                "allowed": allowed,
                "verdict": "added",
            }
        )
    return out


FAILING = ("regression", "missing")


def verdict_text(table: pd.DataFrame, baseline: str) -> str:
    """The check's verdict as text: PASS or FAIL with the regressions counted, then every row compared."""
    bad = table[table["verdict"].isin(FAILING)]
    head = (
        f"nsightflow check against {baseline}: "
        + (f"FAIL, {len(bad)} regression(s)" if len(bad) else "PASS")
        + f" ({len(table)} numbers compared)"
    )

    def num(v: Any) -> str:
        return units.sig(float(v)) if units.finite(v) else units.MISSING

    def pct(v: Any) -> str:
        return units.percent(float(v)) if units.finite(v) else units.MISSING

    records = table.to_dict("records")
    lines = [
        f"{str(r['verdict']).upper():<12} {r['run']} {r['stage']}: {r['what']}: {num(r['baseline'])} -> "
        f"{num(r['current'])} ({pct(r['change'])}; allowed ±{pct(r['allowed'])})"
        for r in sorted(records, key=lambda r: r["verdict"] not in FAILING)
    ]
    return "\n".join([head, *lines]) + "\n"


def save_baseline(runs: dict[str, str | Path], dest: str | Path) -> None:
    """Copy each run's tables and records (``runs``: run id -> its results folder) into ``dest/<run id>/``: a named
    baseline, kept outside results/ (commit it for CI)."""
    dest = Path(dest)
    for run_id, folder in runs.items():
        target = dest / run_id
        target.mkdir(parents=True, exist_ok=True)
        for name in (*RUN_FILES, "experts.csv", "ranks.csv", "steps.csv"):
            if (Path(folder) / name).exists():
                tmp = files.staging(target / name)
                shutil.copyfile(Path(folder) / name, tmp)
                files.publish(tmp, target / name)


def check_runs(pairs: dict[str, tuple[str | Path, str | Path | None]], th: Thresholds, baseline: str) -> str:
    """Every run of ``pairs`` (run id -> (its folder, its baseline's folder, None where the baseline has no such
    run)) compared with its baseline: the verdict text (verdict_text). Raises RegressionError with it where a number
    regressed or a stage or kernel went missing."""
    from nsightflow.errors import RegressionError

    tables, unmatched = [], []
    for run_id, (folder, base) in pairs.items():
        if base is None:
            unmatched.append(run_id)
            continue
        tables.append(compare(RunNumbers.read(run_id, folder), RunNumbers.read(run_id, base), th))
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["verdict"])
    text = verdict_text(table, baseline)
    if unmatched:
        text += f"not compared (the baseline has no such run): {', '.join(unmatched)}\n"
    if table["verdict"].isin(FAILING).any():
        raise RegressionError(
            text + "A change you meant: save it as the new baseline (snakemake --cores 1 baselines/NAME, which "
            "replaces the folder's runs) or raise the config's check thresholds."
        )
    return text
