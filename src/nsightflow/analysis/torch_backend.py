"""The torch.profiler backend's aggregation: operator or kernel times from the trace, the analytic count, the
measured ceilings; no hardware counters."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nsightflow.analysis import metrics, peaks, ranks
from nsightflow.analysis.aggregate import RunTables, load_analytic, program_wall, ranked
from nsightflow.analysis.checks import check_analytic, check_bounds
from nsightflow.analysis.diagnostics import note, stage_notes, wall_note
from nsightflow.errors import InputError
from nsightflow.records import Ceilings, Manifest


def aggregate_torch(
    kernels: pd.DataFrame,
    stages: pd.DataFrame,
    flops_json: str | Path,
    ceiling_json: str | Path,
    precision: str,
    top_n: int | None,
    coverage: float | None,
    kind: str,
    divergence: float,
    manifest_json: str | Path | None = None,
) -> RunTables:
    """One run's tables from a torch.profiler trace: timeline times, analytic FLOPs and bytes, measured ceilings.

    There are no hardware counters on this path: per-kernel FLOPs and bytes stay empty, and the
    roofline is analytic, one point per stage. Wall times are the timed pass's in ``manifest_json`` where it has one.
    """
    idle = sorted(set(stages["stage"]) - set(kernels["stage"]))
    if stages.empty or idle:
        raise InputError(
            f"no kernels or operators ran inside the ranges of stage(s) {idle or 'any'}: the work "
            "happens outside the stages (in setup, or on another thread), or the stage does nothing; "
            "move the work into the stage function"
        )
    ceiling = Ceilings.read(ceiling_json)
    pk = peaks.ceiling_peaks(ceiling, precision)
    analytic = load_analytic(flops_json)
    check_analytic(analytic, stages, str(flops_json))
    table = ranked(kernels, top_n, coverage)
    table["avg_ns"] = table["total_ns"] / table["instances"]
    busy = kernels.groupby("stage", as_index=False).agg(busy_ns=("total_ns", "sum"))
    wall = program_wall(manifest_json)
    ssum = metrics.stage_summary(metrics.with_program_wall(stages, *wall), busy, analytic, pk, divergence)
    ssum = metrics.with_kernel_counts(ssum, kernels)
    what = "CUDA kernels (CUPTI)" if kind == "gpu" else "CPU operators (self time)"
    notes = [
        note(
            "torch.profiler backend",
            f"the kernel table lists {what}; there are no hardware counters on this path, "
            "so FLOPs are the analytic count's and bytes a lower bound (each operator's tensors touched once; "
            "DRAM traffic can be lower when intermediates stay in cache). The roofline is analytic, per stage.",
        ),
        wall_note(wall[0], "torch.profiler"),
    ]
    notes += stage_notes(ssum, analytic)
    check_bounds(ssum, pk)
    manifest = Manifest.read(manifest_json) if manifest_json else Manifest()
    per_rank = ranks.rank_table(ranks.no_launches(), manifest)
    notes += ranks.rank_notes(per_rank, manifest)
    return RunTables(table, ssum, pk, notes, ranks=per_rank)
