"""Captures made elsewhere (nsightflow.capture.launch.imported): the nsys timeline's ranges as stages (nested, a guessed
domain), ncu results joined by search, or nsys stats CSVs alone (times only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from nsightflow import ncu_metrics
from nsightflow.analysis import metrics, peaks
from nsightflow.analysis.aggregate import (
    FULL_COVERAGE,
    RunTables,
    kernel_results,
    load_analytic,
    peaks_for,
    ranked,
    tables,
)
from nsightflow.analysis.checks import (
    check_analytic,
    check_bounds,
    check_durations,
    check_gemm_floor,
    check_kernel_records,
    check_peaks,
    check_result_rates,
    check_streams,
)
from nsightflow.analysis.diagnostics import note, stage_notes
from nsightflow.analysis.experts import routing_table
from nsightflow.analysis.focus import Focus
from nsightflow.capture.read import attribution, ncu_csv, nsys_stats
from nsightflow.capture.read.matching import search_timeline
from nsightflow.errors import InputError
from nsightflow.precisions import SIMT, matmul_precision
from nsightflow.records import CapturesIndex, StageCount


def aggregate_captures(
    imported: str | Path,
    focus: Focus,
    domain: str | None = None,
) -> RunTables:
    """Tables for captures made elsewhere (see nsightflow.capture.launch.imported): ncu results joined to the timeline
    without a plan; MFU's precision is the one that did most of the tensor work. ``domain``: the stages' NVTX domain
    (config ``nvtx_domain``); where the timeline has no range in it, the domain is guessed (never a library's)."""
    imported = Path(imported)
    flops = imported / "analytic_flops.json"
    analytic = load_analytic(flops) if flops.exists() else {}
    exports = sorted((imported / "ncu").glob("*.raw.csv"))
    if not (imported / "timeline.sqlite").exists():
        return _times_only(imported, analytic, focus)
    tl = attribution.read_timeline(imported / "timeline.sqlite", domain, nested=True)
    if (imported / "stats" / "nvtx_sum.csv").exists():
        check_range_counts(
            nsys_stats.stage_table(imported / "stats" / "nvtx_sum.csv", _user_file(imported, "nvtx_sum.csv")), tl
        )
    check_streams(tl.launches[tl.launches["pass_"] == "ranged"], _user_file(imported, "timeline.sqlite"))
    check_kernel_records(tl.launches[tl.launches["pass_"] == "ranged"], _user_file(imported, "timeline.sqlite"))
    check_analytic(analytic, attribution.stage_table(tl), _user_file(imported, "analytic_flops.json"))
    origin = _origins(imported)
    matched = []
    raws = []
    unplaced = 0
    for export in exports:
        raw, _ = ncu_csv.parse_raw_csv(export, origin.get(export.name, str(export)))
        raws.append(raw)
        joined = search_timeline(
            kernel_results(raw, export), tl.launches, tl.domain, origin.get(export.name, export.name)
        )
        check_durations(joined.dropna(subset=["stage"]), tl.launches, origin.get(export.name, export.name))
        unplaced += int(joined["stage"].isna().sum())
        matched.append(joined.dropna(subset=["stage"]))
    results = (
        pd.concat(matched, ignore_index=True)
        if matched
        else pd.DataFrame(
            columns=[
                "ncu_id",
                "stage",
                "class_key",
                "step",
                "duration_ns",
                "sm_hz",
                "dram_hz",
                "bf16_dense_per_cycle",
                "ffma_per_cycle",
                "dram_bytes_per_cycle",
            ]
            + metrics.COUNTERS
        )
    )
    tensor = {p: results[f"flops_tensor_{p}"].sum() for p in ncu_metrics.TENSOR_FLOP_METRICS} if matched else {}
    if tensor and max(tensor.values()) > 0:
        precision, why = max(tensor, key=lambda p: tensor[p]), "most tensor-pipe FLOPs"
    elif matched:
        precision, why = SIMT, "ncu counted no tensor-pipe FLOPs"
    else:  # no counters: the analytic count's GEMMs say, or nothing does (then no compute peak at all)
        chosen = matmul_precision(None, analytic or None)
        precision, why = chosen.precision, chosen.why
    device = (
        next(
            (
                str(r["device__attribute_display_name"].iloc[0])
                for r in raws
                if "device__attribute_display_name" in r.columns and len(r)
            ),
            None,
        )
        or tl.gpu_name
    )
    pk = peaks_for(results, device, precision, None)
    check_peaks(pk, ", ".join(str(e) for e in exports) or "the captures")
    check_result_rates(results, ", ".join(origin.get(e.name, str(e)) for e in exports))
    windowed = set(zip(results["stage"], results["step"], strict=True)) if len(results) else set()
    classes, kernels, stages, _ = tables(tl, results, windowed, analytic, pk, focus)
    # Every tensor precision's counter and the FLOPs outside the tensor pipes in every result: then GEMM FLOPs under
    # the model's cannot be a counter left out, and an analytic count among the captures must agree with them.
    every = bool(len(results)) and all(
        results[c].notna().all() for c in ["flops", *(f"flops_tensor_{p}" for p in ncu_metrics.TENSOR_FLOP_METRICS)]
    )
    check_gemm_floor(stages, _user_file(imported, "analytic_flops.json"), every and bool(analytic))
    if not exports:
        stages["coverage"] = np.nan  # nothing was meant to be counted: times only, not 0% measured
    notes = [
        note(
            "analysis of existing captures",
            f"stages are the ranges of NVTX domain {tl.domain!r}"
            + (f" (config nvtx_domain {domain!r} has none)" if domain and domain != tl.domain else "")
            + f"; precision taken as {precision} ({why})"
            + (
                ""
                if analytic
                else "; no analytic_flops.json among them, so no model FLOPs and no MFU, only HFU from the counted "
                "FLOPs"
            ),
        )
    ]
    notes += [
        note(c, f"a range that only holds other ranges of domain {tl.domain!r}: not a stage; its time is in theirs.")
        for c in tl.containers
    ]
    if unplaced:
        notes.append(
            note(
                "ncu",
                f"{unplaced} results carried no range of domain {tl.domain!r} on their thread's NVTX stack "
                "(launched outside the stages, or by another thread): not joined to any stage.",
            )
        )
    if not exports:
        notes.append(note("", "no ncu exports among the captures: times only, from the nsys timeline."))
    notes += stage_notes(stages, analytic)
    partial = [s for s, c in zip(stages["stage"], stages["coverage"], strict=True) if exports and c < FULL_COVERAGE]
    if partial:
        notes.append(
            note(
                ", ".join(partial),
                "ncu measured part of the GPU time (see Diagnostics), so FLOPs and bytes are "
                "lower bounds. The kernels left out were launched in the stage's time window without the stage's "
                "range on their own thread's NVTX stack (autograd's backward thread: ncu's --nvtx-include filters "
                "per thread), or fell outside the capture's filters. Let nsightflow profile the program, or capture "
                "without --nvtx-include.",
            )
        )
    check_bounds(stages, pk)
    return RunTables(kernels, stages, pk, notes, [], classes, results, experts=routing_table(analytic))


def check_range_counts(stats: pd.DataFrame, tl: attribution.Timeline) -> None:
    """nsys stats' range counts and the SQLite export's must agree: both describe one run."""
    mine = stats[stats["domain"] == tl.domain].set_index("stage")["range_instances"]
    theirs = pd.Series(tl.range_counts, dtype="int64")
    differ = {
        s: (int(mine.get(s, 0)), int(theirs.get(s, 0)))
        for s in set(mine.index) | set(theirs.index)
        if int(mine.get(s, 0)) != int(theirs.get(s, 0))
    }
    if differ:
        raise InputError(
            f"nvtx_sum and the SQLite export disagree on the ranges per stage (stats, SQLite): {differ}: "
            "they come from different runs, or one is cut; export both from one report"
        )


def _user_file(imported: Path, name: str) -> str:
    """The user's file behind an imported ``timeline.sqlite``, ``analytic_flops.json`` or stats CSV, for errors."""
    index = imported / "index.json"
    found = CapturesIndex.read(index).recognised if index.exists() else {}
    kinds = {
        "timeline.sqlite": ("sqlite", "nsys_rep"),
        "analytic_flops.json": ("analytic_flops",),
        "nvtx_kern_sum.csv": ("nvtx_kern_sum",),
        "nvtx_sum.csv": ("nvtx_sum",),
    }[name]
    where = imported / ("stats" if name.endswith("sum.csv") else "") / name
    return next((found[k][0] for k in kinds if found.get(k)), str(where))


def _origins(imported: Path) -> dict[str, str]:
    """The user's file behind each imported ncu export (``000.raw.csv`` → the path given), for errors."""
    index = imported / "index.json"
    exports = CapturesIndex.read(index).exports if index.exists() else []
    return {f"{i:03d}.raw.csv": path for i, path in enumerate(exports)}


def _times_only(imported: Path, analytic: dict[str, StageCount], focus: Focus) -> RunTables:
    """Only nsys stats CSVs: per-thread kernel tables and wall times, no counters."""
    kernels = nsys_stats.kernel_table(
        imported / "stats" / "nvtx_kern_sum.csv", _user_file(imported, "nvtx_kern_sum.csv")
    )
    stages = nsys_stats.stage_table(imported / "stats" / "nvtx_sum.csv", _user_file(imported, "nvtx_sum.csv"))
    held = nsys_stats.containers(kernels, stages)  # as the SQLite path resolves nested ranges
    kernels, stages = kernels[~kernels["stage"].isin(held)], stages[~stages["stage"].isin(held)].reset_index(drop=True)
    if analytic:  # the stats' ranges of other domains (libraries') are not the count's stages
        mine = stages[stages["stage"].isin(set(analytic))]
        check_analytic(analytic, mine if len(mine) else stages, _user_file(imported, "analytic_flops.json"))
    idle = sorted(set(stages["stage"]) - set(kernels["stage"]))
    if idle:
        raise InputError(
            f"{imported / 'stats'}: nvtx_sum has ranges of stage(s) {idle} that nvtx_kern_sum has no "
            "kernels for: a cut export, or the two come from different runs; export both again"
        )
    pk = peaks.peaks(
        pd.DataFrame(columns=["sm_hz", "dram_hz", "bf16_dense_per_cycle", "ffma_per_cycle", "dram_bytes_per_cycle"]),
        None,
        matmul_precision(None, analytic).precision,
    )
    table = ranked(kernels, focus.top_n, focus.coverage)
    table["avg_ns"] = table["total_ns"] / table["instances"]
    busy = kernels.groupby("stage", as_index=False).agg(busy_ns=("total_ns", "sum"))
    ssum = metrics.with_kernel_counts(metrics.stage_summary(stages, busy, analytic, pk, focus.divergence), kernels)
    check_bounds(ssum, pk)
    return RunTables(
        table,
        ssum,
        pk,
        [
            note(
                "",
                "no SQLite export and no ncu exports among the captures: times only, from nsys stats "
                "(kernels attributed per thread, as nsys projects them).",
            ),
            *(
                note(
                    c,
                    "a range that only holds other ranges (its kernels are theirs): not a stage; its time is in "
                    "theirs.",
                )
                for c in held
            ),
        ],
        experts=routing_table(analytic),
    )
