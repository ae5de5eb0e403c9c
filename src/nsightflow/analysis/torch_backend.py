"""The torch.profiler backend's aggregation: operator or kernel times from the trace, the analytic count, the
measured ceilings; no hardware counters."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from nsightflow.analysis import metrics, peaks, ranks
from nsightflow.analysis.aggregate import RunTables, load_analytic, program_wall, ranked, with_timed_run
from nsightflow.analysis.checks import check_analytic, check_bounds
from nsightflow.analysis.diagnostics import note, stage_notes, wall_note
from nsightflow.analysis.experts import routing_table
from nsightflow.analysis.focus import Focus
from nsightflow.analysis.steps import step_table
from nsightflow.errors import InputError
from nsightflow.records import Ceilings, Diagnostic, Manifest, Peaks


def aggregate_torch(
    kernels: pd.DataFrame,
    stages: pd.DataFrame,
    flops_json: str | Path,
    ceiling_json: str | Path,
    precision: str,
    focus: Focus,
    kind: str,
    manifest_json: str | Path | None = None,
    expert_ns: dict[str, float] | None = None,
) -> RunTables:
    """One run's tables from a torch.profiler trace: timeline times, analytic FLOPs and bytes, measured ceilings.

    There are no hardware counters on this path: per-kernel FLOPs and bytes stay empty, and the
    roofline is analytic, one point per stage. Wall times are the timed pass's in ``manifest_json`` where it has one.
    ``expert_ns``: per stage, the time of its grouped GEMMs (nsightflow.analysis.torchprof.expert_time).
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
    table = ranked(kernels, focus.top_n, focus.coverage)
    table["avg_ns"] = table["total_ns"] / table["instances"]
    wall = program_wall(manifest_json)
    walls = metrics.with_program_wall(stages, *wall)
    busy = kernels.groupby("stage", as_index=False).agg(busy_ns=("total_ns", "sum"))
    busy["expert_ns"] = busy["stage"].map(expert_ns or {}).astype(float)
    if kind != "gpu":
        raw = busy["busy_ns"].to_numpy()
        busy = cpu_busy(busy, walls)
        busy["expert_ns"] *= busy["busy_ns"].to_numpy() / raw  # the experts' time scaled as their stage's
    ssum = metrics.stage_summary(walls, busy, analytic, pk, focus.divergence)
    check_bounds(ssum, pk)
    ssum, pk, ceiling_notes = within_ceilings(ssum, pk, ceiling)
    ssum = with_timed_run(metrics.with_kernel_counts(ssum, kernels), manifest_json)
    what = (
        "CUDA kernels (CUPTI)"
        if kind == "gpu"
        else "CPU operators (self time); a stage's busy time is its operators' time on the steps' thread, or, where "
        "the profiler's slowing puts that above the program's own wall, their share of the profiled steps applied to "
        "that wall: never above it"
    )
    notes = [
        note(
            "torch.profiler backend",
            f"the kernel table lists {what}; there are no hardware counters on this path, "
            "so FLOPs are the analytic count's and bytes a lower bound (each operator's tensors touched once; "
            "DRAM traffic can be lower when intermediates stay in cache). The roofline is analytic, per stage.",
        ),
        wall_note(wall[0], "torch.profiler", walls=walls, device=kind),
    ]
    notes += ceiling_notes + stage_notes(ssum, analytic)
    manifest = Manifest.read(manifest_json) if manifest_json else Manifest()
    per_rank = ranks.rank_table(ranks.no_launches(), manifest)
    notes += ranks.rank_notes(per_rank, manifest)
    device = "cpu" if kind != "gpu" else "gpu"
    experts, steps = routing_table(analytic), step_table(manifest, analytic, pk)
    return RunTables(table, ssum, pk, notes, ranks=per_rank, device=device, experts=experts, steps=steps)


def cpu_busy(busy: pd.DataFrame, walls: pd.DataFrame) -> pd.DataFrame:
    """CPU busy time per stage, never above the program's own wall: the operators' self time under torch.profiler
    (``busy_ns``, on the steps' thread) where it fits in that wall, else the share of the profiled steps' wall that
    operators ran, times the program's wall.

    torch.profiler slows every operator call (microseconds each): a stage of small operators can spend several times
    the program's wall in operators under it ("busy 830% of wall"); their share of the profiled steps is what carries
    over. Where the operator time fits, it is kept as measured: a step that waits (a collective's peer, slower under
    the profiler) would make the share, not the operators, shrink. Without a timed pass the ranges' own wall counts.
    """
    by = walls.set_index("stage")
    out = busy.copy()
    rows = []
    for stage, ns in zip(out["stage"], out["busy_ns"], strict=True):
        w = by.loc[stage]
        wall = float(w["wall_ns"])
        profiled = float(w["wall_profiled_ns"]) if pd.notna(w["wall_profiled_ns"]) else wall
        rows.append(ns if ns <= wall else (min(1.0, ns / profiled) * wall if profiled > 0 else float("nan")))
    out["busy_ns"] = rows
    return out


def _spread(runs: list[float], unit: str, scale: float) -> str:
    return f"{runs[0] / scale:.3g} to {runs[-1] / scale:.3g} {unit}" if runs else "not recorded"


def within_ceilings(ssum: pd.DataFrame, pk: Peaks, ceiling: Ceilings) -> tuple[pd.DataFrame, Peaks, list[Diagnostic]]:
    """Utilisations against measured ceilings, never above 100%: a ceiling is a microbenchmark's best run, a
    lower bound of what the device can do, and a stage that ran faster proves it higher.

    - Compute: the ceiling becomes the fastest stage's own rate (model FLOPs per busy second), every MFU is divided
      by it, and a note names the stage, both rates and the microbenchmark's spread.
    - Operator bytes: a rate above the copy ceiling means the tensors were served from cache, not memory; that
      stage's bandwidth use is not shown ("—"), with a note.
    Values beyond any device's tolerance were refused before (nsightflow.analysis.checks.check_bounds).
    """
    out, notes = ssum.copy(), []
    mfu = out["mfu_busy"].astype(float)
    if np.isfinite(pk.compute) and (mfu > 1).any():
        top = int(mfu.idxmax())
        rate = float(mfu[top]) * pk.compute
        stage = str(out.loc[top, "stage"])
        notes.append(
            note(
                stage,
                f"{stage} ran at {rate / 1e9:.4g} GFLOP/s of model FLOPs on busy time, {mfu[top] - 1:.1%} above the "
                f"measured matmul ceiling ({pk.compute / 1e9:.4g} GFLOP/s, the best of its repetitions, which spread "
                f"{_spread(ceiling.matmul_runs, 'GFLOP/s', 1e9)}): the ceiling measured low, so this stage's rate is "
                "taken as the ceiling and every MFU of the run is against it",
            )
        )
        for col in ("mfu_busy", "mfu_wall", "hfu_busy", "hfu_wall"):
            if col in out:
                out[col] = out[col].astype(float) / float(mfu[top])
        pk = replace(
            pk,
            compute=rate,
            compute_source=f"the rate stage {stage} reached ({pk.compute_source}, {rate / pk.compute - 1:.1%} lower)",
        )
    bw = out["bw_util_busy_model"].astype(float)
    for i in out.index[bw > 1]:
        stage = str(out.loc[i, "stage"])
        notes.append(
            note(
                stage,
                f"{stage}'s operators touched {bw[i] * pk.dram / 1e9:.4g} GB/s of tensors on busy time, above the "
                f"measured copy rate ({pk.dram / 1e9:.4g} GB/s, spread {_spread(ceiling.copy_runs, 'GB/s', 1e9)}): "
                "they were served from cache, not memory, so its bandwidth use cannot be told and is not shown",
            )
        )
        out.loc[i, "bw_util_busy_model"] = np.nan
    return out, pk, notes
