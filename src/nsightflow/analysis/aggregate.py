"""The shared core of every backend's aggregation: a run's tables have the same shapes whatever produced them: a
kernel table (per stage and kernel), a stage table (per stage: times, FLOPs, bytes, MFU, HFU, bandwidth), peaks,
notes and diagnostics (:class:`RunTables`). The backends: nsightflow.analysis.nsight (nsys and ncu),
nsightflow.analysis.torch_backend (torch.profiler), nsightflow.analysis.captures (captures made elsewhere); what a
reader must know of the numbers: nsightflow.analysis.diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsightflow import columns
from nsightflow.analysis import bounds, metrics
from nsightflow.analysis.focus import Focus
from nsightflow.analysis.peaks import peaks as device_peaks
from nsightflow.analysis.peaks import with_ceiling
from nsightflow.analysis.selection import select_kernels
from nsightflow.analysis.steps import stage_paces, step_measured
from nsightflow.capture.read import attribution, ncu_csv
from nsightflow.errors import InputError
from nsightflow.records import AnalyticCounts, Ceilings, Diagnostic, Manifest, Peaks, StageCount

# A stage whose counters cover less of its GPU time than this is called partly measured (a warning, lower bounds).
FULL_COVERAGE = 0.999


@dataclass
class RunTables:
    """One run's aggregation, whatever the backend: what runfiles.write_run writes and diagnose reads."""

    kernels: pd.DataFrame  # per (stage, kernel or operator)
    stages: pd.DataFrame  # per stage
    peaks: Peaks  # compute and bandwidth peaks with their sources
    notes: list[Diagnostic]  # how to read the numbers (level 'note')
    estimates: list[Diagnostic] = field(default_factory=list)  # numbers derived rather than measured
    classes: pd.DataFrame = field(default_factory=pd.DataFrame)  # per class of identical launches (nsight)
    results: pd.DataFrame = field(default_factory=pd.DataFrame)  # ncu results joined to launches (nsight)
    # per rank and stage of a job of several processes; none (its columns only) for one process
    ranks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=columns.names("ranks")))
    # an MoE's routing per (stage, step, routing) from its grouped GEMMs (nsightflow.analysis.experts); none without
    experts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=columns.names("experts")))
    # a command's every step (nsightflow.analysis.steps); none (its columns only) for a callable
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=columns.names("steps")))
    device: str = "gpu"  # what ran the stages: 'gpu' or 'cpu' (words and advice follow it)

    def __post_init__(self) -> None:
        if "stage" in self.stages.columns and "bound" not in self.stages.columns:
            self.stages = bounds.with_bounds(self.stages, self.device)  # what bounds each stage, from its own numbers


def load_analytic(path: str | Path) -> dict[str, StageCount]:
    """The per-stage analytic counts of ``analytic_flops.json`` (nsightflow.records.AnalyticCounts, checked)."""
    return AnalyticCounts.read(path).stages


def kernel_results(raw: pd.DataFrame, export: str | Path) -> pd.DataFrame:
    """Per-result metrics of one export; a per-range export (range replay) cannot be joined per kernel."""
    if "Grid Size" not in raw.columns:
        raise InputError(
            f"{export}: one result per range (range or app-range replay), not per kernel: give it as "
            "a range capture (ncu.ranges), or capture with replay mode 'kernel'"
        )
    return ncu_csv.result_metrics(raw)


def ranked(kernels: pd.DataFrame, top_n: int | None, coverage: float | None) -> pd.DataFrame:
    """Every kernel ranked by time within its stage, the top-N selection (the report's focus) marked."""
    ranked = select_kernels(kernels, None, 1.0)
    chosen = select_kernels(kernels, top_n, coverage) if (top_n or coverage) else ranked.iloc[0:0]
    key = ["stage", "kernel"]
    ranked["selected"] = ranked.set_index(key).index.isin(chosen.set_index(key).index)
    return ranked


def peaks_for(results: pd.DataFrame, device: str | None, precision: str, ceiling: Ceilings | None) -> Peaks:
    pk = device_peaks(results, device, precision)
    return with_ceiling(pk, ceiling) if ceiling is not None and ceiling.measured else pk


def tables(
    tl: attribution.Timeline,
    matched: pd.DataFrame,
    chosen: set[tuple[str, int]],
    analytic: dict[str, Any],
    pk: Peaks,
    focus: Focus,
    by_call: bool = True,
    program_wall: tuple[dict[str, list[float]] | None, str] = (None, ""),
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(classes, kernels, stages, per step: nsightflow.analysis.steps.step_measured) of a run whose ncu results are
    joined to its timeline; ``chosen``: the
    (stage, step) pairs the capture measured; ``by_call``: see nsightflow.analysis.metrics.launch_values;
    ``program_wall``: the timed pass's step times and the file they come from
    (nsightflow.analysis.metrics.with_program_wall)."""
    values = metrics.launch_values(tl.launches[tl.launches["pass_"] == "ranged"], matched, chosen, by_call)
    classes = metrics.class_summary(values)
    kernels = ranked(metrics.kernel_summary(classes, tl.ranges, pk), focus.top_n, focus.coverage)
    walls = metrics.with_program_wall(attribution.stage_table(tl), *program_wall)
    if tl.probe_stands_in:  # the traced steps are the probe pass's, which its dispatch mode slows, not only nsys
        walls["wall_profiled_ns"] = np.nan
    stages = metrics.stage_summary(walls, metrics.stage_measured(values), analytic, pk, focus.divergence)
    stages = metrics.with_kernel_counts(stages, kernels)
    return classes, kernels, stages, step_measured(values)


def program_wall(manifest_json: str | Path | None) -> tuple[dict[str, list[float]] | None, str]:
    """The timed pass's step times in a run's manifest (None where it has none: an older run), and its path."""
    if manifest_json is None:
        return None, ""
    return Manifest.read(manifest_json).program_wall_s, str(manifest_json)


MEMORY = {"allocated": "memory_allocated_peak", "reserved": "memory_reserved_peak", "rss": "memory_rss_peak"}


def with_timed_run(stages: pd.DataFrame, manifest_json: str | Path | None) -> pd.DataFrame:
    """Each stage's peak memory (manifest ``program_memory``: nsightflow.capture.inside.memory; a callable's timed
    pass, a command's run under nsys or count run), NaN where it was not measured (no CUDA allocator, no Linux
    high-water mark, a command that compiles on the torch.profiler path, an older run); and a command's
    pace a step (nsightflow.analysis.steps.stage_paces), NaN where its steps never follow one another."""
    manifest = Manifest.read(manifest_json) if manifest_json else None
    measured = manifest.program_memory if manifest is not None else None
    out = stages.copy()
    for key, col in MEMORY.items():
        out[col] = [float((measured or {}).get(str(s), {}).get(key, np.nan)) for s in out["stage"]]
    paces = stage_paces(manifest) if manifest is not None else {}
    out["pace_ms"] = [paces.get(str(s), np.nan) * 1e3 for s in out["stage"]]
    return out
