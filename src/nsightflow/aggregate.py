"""Assemble one run's tables: the attributed timeline, the capture and its plan, the analytic counts.

Every backend ends here with the same shapes: a kernel table (per stage and kernel), a stage table
(per stage: times, FLOPs, bytes, MFU, HFU, bandwidth), peaks, notes and diagnostics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from nsightflow import attribution, metrics, ncu, ncu_csv, nsys, units
from nsightflow.checks import check_analytic, check_bounds, check_durations, check_gemm_floor, check_streams
from nsightflow.flops import SIMT, matmul_precision
from nsightflow.matching import match_to_plan, search_timeline
from nsightflow.plan import CapturePlan, chosen_pairs, expected_frame
from nsightflow.selection import select_kernels

# A stage whose counters cover less of its GPU time than this is called partly measured (a warning, lower bounds).
FULL_COVERAGE = 0.999


@dataclass(frozen=True)
class Diagnostic:
    """One line of a run page's Diagnostics: made where the fact is known, never parsed back from prose."""

    level: Literal["warning", "estimate", "info"]
    source: str  # the stage, the tool or "peaks"
    message: str


@dataclass
class RunTables:
    """One run's aggregation, whatever the backend: what runfiles.write_run writes and diagnose reads."""

    kernels: pd.DataFrame  # per (stage, kernel or operator)
    stages: pd.DataFrame  # per stage
    peaks: metrics.Peaks  # compute and bandwidth peaks with their sources
    notes: list[str]  # what a reader must know to read the numbers
    estimates: list[Diagnostic] = field(default_factory=list)  # numbers derived rather than measured
    classes: pd.DataFrame = field(default_factory=pd.DataFrame)  # per class of identical launches (nsight)
    results: pd.DataFrame = field(default_factory=pd.DataFrame)  # ncu results joined to launches (nsight)


MODE_TEXT = {
    "representatives": "one profiled launch per class of identical launches (the same operator call, by shapes "
    "and arguments, launching the same kernel with the same grid, block and shared memory); a call profiled in "
    "one step stands for the same call in every step of its stage, and launches no call identifies (CUDA-graph "
    "replays, compiled code) are profiled in each sampled step and stand for the launch at the same position "
    "in the other steps",
    "every_launch": "every launch of the sampled steps profiled, each class's mean scaled by its launches in the "
    "timeline",
}


COUNT_KEYS = ("flops", "flops_causal_adjusted", "attention_flops_full", "causal_masked_flops", "bytes_lower_bound")


def load_analytic(path: str | Path) -> dict:
    """The per-stage analytic counts of ``analytic_flops.json``, each count a non-negative number or empty."""
    path = Path(path)
    try:
        stages = json.loads(path.read_text())["stages"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not an analytic_flops.json with a 'stages' object ({exc!r})") from exc
    for stage, counts in stages.items():
        for key in COUNT_KEYS:
            v = (counts or {}).get(key)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0):
                raise ValueError(
                    f"{path}: stage {stage!r}: {key} is {v!r}; a count is a number of 0 or more "
                    "(or null when it could not be made)"
                )
    return stages


def _kernel_results(raw: pd.DataFrame, export: str | Path) -> pd.DataFrame:
    """Per-result metrics of one export; a per-range export (range replay) cannot be joined per kernel."""
    if "Grid Size" not in raw.columns:
        raise ValueError(
            f"{export}: one result per range (range or app-range replay), not per kernel: give it as "
            "a range capture (ncu.ranges), or capture with replay mode 'kernel'"
        )
    return metrics.result_metrics(raw)


def _ranked(kernels: pd.DataFrame, top_n: int | None, coverage: float | None) -> pd.DataFrame:
    """Every kernel ranked by time within its stage, the top-N selection (the report's focus) marked."""
    ranked = select_kernels(kernels, None, 1.0)
    chosen = select_kernels(kernels, top_n, coverage) if (top_n or coverage) else ranked.iloc[0:0]
    key = ["stage", "kernel"]
    ranked["selected"] = ranked.set_index(key).index.isin(chosen.set_index(key).index)
    return ranked


def _peaks(results: pd.DataFrame, device: str | None, precision: str, ceiling: dict | None) -> metrics.Peaks:
    pk = metrics.peaks(results, device, precision)
    return metrics.with_ceiling(pk, ceiling) if ceiling and "error" not in ceiling else pk


def tables(
    tl: attribution.Timeline,
    matched: pd.DataFrame,
    chosen: set[tuple[str, int]],
    analytic: dict,
    pk: metrics.Peaks,
    divergence: float,
    top_n: int | None,
    coverage: float | None,
    by_call: bool = True,
    program_wall: tuple[dict[str, list[float]] | None, str] = (None, ""),
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(classes, kernels, stages) of a run whose ncu results are joined to its timeline; ``chosen``: the
    (stage, step) pairs the capture measured; ``by_call``: see nsightflow.metrics.launch_values;
    ``program_wall``: the timed pass's step times and the file they come from (nsightflow.metrics.with_program_wall)."""
    values = metrics.launch_values(tl.launches[tl.launches["pass_"] == "ranged"], matched, chosen, by_call)
    classes = metrics.class_summary(values)
    kernels = _ranked(metrics.kernel_summary(classes, tl.ranges, pk), top_n, coverage)
    walls = metrics.with_program_wall(attribution.stage_table(tl), *program_wall)
    stages = metrics.stage_summary(walls, metrics.stage_measured(values), analytic, pk, divergence)
    return classes, kernels, stages


def aggregate_run(
    sqlite: str | Path,
    domain: str,
    plan_json: str | Path,
    export: str | Path,
    flops_json: str | Path,
    precision: str,
    divergence: float,
    top_n: int | None = None,
    coverage: float | None = None,
    ceiling_json: str | Path | None = None,
    ranges_export: str | Path | None = None,
    ranges_plan: str | Path | None = None,
    manifest_json: str | Path | None = None,
    capture_record: dict | None = None,
) -> RunTables:
    """Per-class, per-kernel and per-stage tables of one Nsight run, plus peaks, notes and estimates. Wall times are
    the timed pass's in ``manifest_json`` (the program unslowed by nsys) where it has one. The inputs are checked
    against one another (nsightflow.checks); ``capture_record`` (capture.cmd.json) says which counters ncu collected."""
    tl = attribution.read_timeline(sqlite, domain)
    plan = CapturePlan.read(plan_json)
    raw, _ = ncu_csv.parse_raw_csv(Path(export))
    matched = match_to_plan(_kernel_results(raw, export), expected_frame(plan), Path(export).name)
    check_durations(matched, tl.launches, str(export))
    check_streams(tl.launches[tl.launches["pass_"] == "ranged"], str(sqlite))
    analytic = load_analytic(flops_json)
    check_analytic(analytic, attribution.stage_table(tl), str(flops_json), tl.probe_calls)
    ceiling = json.loads(Path(ceiling_json).read_text()) if ceiling_json else None
    device = (
        next(iter(raw["device__attribute_display_name"].dropna()), None)
        if "device__attribute_display_name" in raw.columns
        else None
    )
    pk = _peaks(matched, device or tl.gpu_name, precision, ceiling)
    wall = program_wall(manifest_json)
    classes, kernels, stages = tables(
        tl, matched, chosen_pairs(plan), analytic, pk, divergence, top_n, coverage, plan.mode == "representatives", wall
    )
    notes = [f"capture: {MODE_TEXT[plan.mode]}.", wall_note(wall[0], "nsys")]
    estimates = []
    for stage, s in plan.stages.items():
        text = f"{s['profiled']} of {s['launches']} launches profiled ({s['classes']} classes of identical launches)"
        if s["steps"] > 1:
            before = s.get("steps_profiled_before", [])
            text += (
                f", in steps {s['sampled_steps']} of {s['steps']}"
                + (f" and {s['extra_steps']} (launch sequences no sampled step has)" if s["extra_steps"] else "")
                + (
                    f"; step(s) {before} launched only calls profiled in an earlier step, so none of theirs was"
                    if before
                    else ""
                )
                + "; the other steps scaled launch by launch from the same calls, or from the sampled steps' launch "
                "at the same position"
            )
        notes.append(f"{stage}: {text}.")
        if s["profiled"] < s["launches"]:
            estimates.append(Diagnostic("estimate", stage, text))
    whole = [w for w in plan.windows if w.units is None and plan.mode == "representatives"]
    for w in whole:
        notes.append(f"{w.stage} step {w.step}: {w.why}.")
    if ranges_export:
        stages = with_range_totals(stages, ranges_export, ranges_plan, tl)
    notes += stage_notes(stages, analytic)
    check_bounds(stages, pk)
    check_gemm_floor(stages, str(flops_json), every_precision_collected(capture_record))
    return RunTables(kernels, stages, pk, notes, estimates, classes, matched)


def every_precision_collected(record: dict | None) -> bool:
    """Whether a capture (its capture.cmd.json) collected the FLOPs of every precision its GEMMs and attentions ran
    in: then measured GEMM FLOPs below the model's cannot be explained by a counter left out."""
    if not record or record.get("precisions_seen") is None or not record.get("tensor_precisions"):
        return False
    seen = set(record["precisions_seen"])
    return seen - {SIMT} <= set(record["tensor_precisions"]) and (
        SIMT not in seen or bool(record.get("non_tensor_flops"))
    )


def program_wall(manifest_json: str | Path | None) -> tuple[dict[str, list[float]] | None, str]:
    """The timed pass's step times in a run's manifest (None where it has none: an older run), and its path."""
    if manifest_json is None:
        return None, ""
    data = json.loads(Path(manifest_json).read_text())
    return data.get("program_wall_s"), str(manifest_json)


def wall_note(program: dict | None, profiler: str) -> str:
    """What the wall times on the page are."""
    if program:
        return (
            "wall times are the program's own: every step timed after the warm-up with no NVTX range and no profiler "
            f"collecting; the same steps under {profiler} ('wall under profiler') took longer, since the profiler adds "
            "time to every launch; busy times are the GPU's, which the profiler does not slow."
        )
    return (
        f"wall times are those of the ranges under {profiler}, which adds time to every launch: a launch-bound "
        "stage runs faster without it."
    )


def range_results(export: str | Path, plan_json: str | Path) -> pd.DataFrame:
    """One row per range window of a range-replay capture: stage, step and the window's counter totals."""
    raw, _ = ncu_csv.parse_raw_csv(Path(export))
    plan = CapturePlan.read(plan_json)
    if len(raw) != len(plan.windows):
        raise ValueError(f"{export}: {len(raw)} range results, the range plan has {len(plan.windows)} windows")
    res = metrics.result_metrics(raw).sort_values("ncu_id").reset_index(drop=True)
    res["stage"] = [w.stage for w in plan.windows]
    res["step"] = [w.step for w in plan.windows]
    return res


def with_range_totals(
    stages: pd.DataFrame, export: str | Path, plan_json: str | Path, tl: attribution.Timeline
) -> pd.DataFrame:
    """Stage totals from range replay (mean over the sampled step windows × the stage's steps) beside the
    per-kernel totals: tensor FLOPs and DRAM bytes (range replay cannot count SASS instructions)."""
    res = range_results(export, plan_json)
    n = tl.ranges.groupby("stage").size()
    per = res.groupby("stage").agg(
        tensor=("flops_tensor", metrics._mean_strict), dram=("dram_bytes", metrics._mean_strict)
    )
    out = stages.copy()
    out["flops_tensor_ranges"] = [per.loc[s, "tensor"] * n[s] if s in per.index else np.nan for s in out["stage"]]
    out["dram_bytes_ranges"] = [per.loc[s, "dram"] * n[s] if s in per.index else np.nan for s in out["stage"]]
    return out


def aggregate_captures(
    imported: str | Path,
    divergence: float,
    top_n: int | None = None,
    coverage: float | None = None,
    domain: str | None = None,
) -> RunTables:
    """Tables for captures made elsewhere (see nsightflow.imported): ncu results joined to the timeline without
    a plan; MFU's precision is the one that did most of the tensor work. ``domain``: the stages' NVTX domain
    (config ``nvtx_domain``); where the timeline has no range in it, the domain is guessed (never a library's)."""
    imported = Path(imported)
    flops = imported / "analytic_flops.json"
    analytic = load_analytic(flops) if flops.exists() else {}
    exports = sorted((imported / "ncu").glob("*.raw.csv"))
    if not (imported / "timeline.sqlite").exists():
        return _times_only(imported, analytic, divergence, top_n, coverage)
    tl = attribution.read_timeline(imported / "timeline.sqlite", domain, nested=True)
    if (imported / "stats" / "nvtx_sum.csv").exists():
        check_range_counts(nsys.stage_table(imported / "stats" / "nvtx_sum.csv"), tl)
    check_streams(tl.launches[tl.launches["pass_"] == "ranged"], _user_file(imported, "timeline.sqlite"))
    check_analytic(analytic, attribution.stage_table(tl), _user_file(imported, "analytic_flops.json"))
    origin = _origins(imported)
    matched = []
    raws = []
    unplaced = 0
    for export in exports:
        raw, _ = ncu_csv.parse_raw_csv(export, origin.get(export.name, str(export)))
        raws.append(raw)
        joined = search_timeline(
            _kernel_results(raw, export), tl.launches, tl.domain, origin.get(export.name, export.name)
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
    tensor = {p: results[f"flops_tensor_{p}"].sum() for p in ncu.TENSOR_FLOP_METRICS} if matched else {}
    if tensor and max(tensor.values()) > 0:
        precision, why = max(tensor, key=tensor.get), "most tensor-pipe FLOPs"
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
    pk = _peaks(results, device, precision, None)
    windowed = set(zip(results["stage"], results["step"], strict=True)) if len(results) else set()
    classes, kernels, stages = tables(tl, results, windowed, analytic, pk, divergence, top_n, coverage)
    if not exports:
        stages["coverage"] = np.nan  # nothing was meant to be counted: times only, not 0% measured
    notes = [
        f"analysis of existing captures: stages are the ranges of NVTX domain {tl.domain!r}"
        + (f" (config nvtx_domain {domain!r} has none)" if domain and domain != tl.domain else "")
        + f"; precision taken as {precision} ({why})"
        + (
            ""
            if analytic
            else "; no analytic_flops.json among them, so no model FLOPs and no MFU, only HFU from the counted FLOPs"
        )
    ]
    notes += [
        f"{c}: a range that only holds other ranges of domain {tl.domain!r}: not a stage; its time is in theirs."
        for c in tl.containers
    ]
    if unplaced:
        notes.append(
            f"{unplaced} ncu results carried no range of domain {tl.domain!r} on their thread's NVTX stack "
            "(launched outside the stages, or by another thread): not joined to any stage."
        )
    if not exports:
        notes.append("no ncu exports among the captures: times only, from the nsys timeline.")
    notes += stage_notes(stages, analytic)
    partial = [s for s, c in zip(stages["stage"], stages["coverage"], strict=True) if exports and c < FULL_COVERAGE]
    if partial:
        notes.append(
            f"{', '.join(partial)}: ncu measured part of the GPU time (see Diagnostics), so FLOPs and bytes are "
            "lower bounds. The kernels left out were launched in the stage's time window without the stage's "
            "range on their own thread's NVTX stack (autograd's backward thread: ncu's --nvtx-include filters "
            "per thread), or fell outside the capture's filters. Let nsightflow profile the program, or capture "
            "without --nvtx-include."
        )
    check_bounds(stages, pk)
    return RunTables(kernels, stages, pk, notes, [], classes, results)


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
        raise ValueError(
            f"nvtx_sum and the SQLite export disagree on the ranges per stage (stats, SQLite): {differ}: "
            "they come from different runs, or one is cut; export both from one report"
        )


def _user_file(imported: Path, name: str) -> str:
    """The user's file behind an imported ``timeline.sqlite`` or ``analytic_flops.json``, for errors."""
    index = imported / "index.json"
    found = json.loads(index.read_text()).get("recognised", {}) if index.exists() else {}
    kinds = {"timeline.sqlite": ("sqlite", "nsys_rep"), "analytic_flops.json": ("analytic_flops",)}[name]
    return next((found[k][0] for k in kinds if found.get(k)), str(imported / name))


def _origins(imported: Path) -> dict[str, str]:
    """The user's file behind each imported ncu export (``000.raw.csv`` → the path given), for errors."""
    index = imported / "index.json"
    exports = json.loads(index.read_text()).get("exports", []) if index.exists() else []
    return {f"{i:03d}.raw.csv": path for i, path in enumerate(exports)}


def _times_only(imported: Path, analytic: dict, divergence: float, top_n, coverage) -> dict:
    """Only nsys stats CSVs: per-thread kernel tables and wall times, no counters."""
    kernels = nsys.kernel_table(imported / "stats" / "nvtx_kern_sum.csv")
    stages = nsys.stage_table(imported / "stats" / "nvtx_sum.csv")
    if analytic:  # the stats' ranges of other domains (libraries') are not the count's stages
        mine = stages[stages["stage"].isin(set(analytic))]
        check_analytic(analytic, mine if len(mine) else stages, _user_file(imported, "analytic_flops.json"))
    idle = sorted(set(stages["stage"]) - set(kernels["stage"]))
    if idle:
        raise ValueError(
            f"{imported / 'stats'}: nvtx_sum has ranges of stage(s) {idle} that nvtx_kern_sum has no "
            "kernels for: a cut export, or the two come from different runs; export both again"
        )
    pk = metrics.peaks(
        pd.DataFrame(columns=["sm_hz", "dram_hz", "bf16_dense_per_cycle", "ffma_per_cycle", "dram_bytes_per_cycle"]),
        None,
        matmul_precision(None, analytic).precision,
    )
    ranked = _ranked(kernels, top_n, coverage)
    ranked["avg_ns"] = ranked["total_ns"] / ranked["instances"]
    busy = kernels.groupby("stage", as_index=False)["total_ns"].sum().rename(columns={"total_ns": "busy_ns"})
    ssum = metrics.stage_summary(stages, busy, analytic, pk, divergence)
    check_bounds(ssum, pk)
    return RunTables(
        ranked,
        ssum,
        pk,
        [
            "no SQLite export and no ncu exports among the captures: times only, from nsys stats "
            "(kernels attributed per thread, as nsys projects them)."
        ],
    )


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
        raise ValueError(
            f"no kernels or operators ran inside the ranges of stage(s) {idle or 'any'}: the work "
            "happens outside the stages (in setup, or on another thread), or the stage does nothing; "
            "move the work into the stage function"
        )
    ceiling = json.loads(Path(ceiling_json).read_text())
    pk = metrics.ceiling_peaks(ceiling, precision)
    analytic = load_analytic(flops_json)
    check_analytic(analytic, stages, str(flops_json))
    ranked = _ranked(kernels, top_n, coverage)
    ranked["avg_ns"] = ranked["total_ns"] / ranked["instances"]
    busy = kernels.groupby("stage", as_index=False)["total_ns"].sum().rename(columns={"total_ns": "busy_ns"})
    wall = program_wall(manifest_json)
    ssum = metrics.stage_summary(metrics.with_program_wall(stages, *wall), busy, analytic, pk, divergence)
    what = "CUDA kernels (CUPTI)" if kind == "gpu" else "CPU operators (self time)"
    notes = [
        f"torch.profiler backend: the kernel table lists {what}; there are no hardware counters on this path, "
        "so FLOPs are the analytic count's and bytes a lower bound (each operator's tensors touched once; "
        "DRAM traffic can be lower when intermediates stay in cache). The roofline is analytic, per stage.",
        wall_note(wall[0], "torch.profiler"),
    ]
    notes += stage_notes(ssum, analytic)
    check_bounds(ssum, pk)
    return RunTables(ranked, ssum, pk, notes)


def stage_notes(ssum: pd.DataFrame, analytic: dict | None = None) -> list[str]:
    """Per stage: what the counters did not cover, wall time far above busy time, FLOP differences, and
    analytic counts that could not be made."""
    notes = []
    for _, s in ssum.iterrows():
        if np.isfinite(s["coverage"]) and s["coverage"] < FULL_COVERAGE:
            notes.append(
                f"{s['stage']}: FLOPs and bytes are counted for {s['coverage']:.1%} of the stage's GPU time; "
                "the rest is not measured, so its HFU and bandwidth are lower bounds."
            )
        if s["diverges"]:
            notes.append(
                f"{s['stage']}: busy time is {s['busy_over_wall']:.0%} of the range's wall time: the device "
                "waits on the CPU (launch overhead, Python dispatch, synchronisation); MFU on wall time "
                "measures the program, MFU on busy time the kernels."
            )
        over = [
            f"{label} {s[col]:.0%}"
            for col, label in (
                ("mfu_busy", "MFU"),
                ("hfu_busy", "HFU"),
                ("dram_bw_util_busy", "DRAM bandwidth utilisation"),
                ("bw_util_busy_model", "bandwidth utilisation"),
            )
            if col in s and np.isfinite(s[col]) and s[col] > 1
        ]
        if over:
            notes.append(
                f"{s['stage']}: {', '.join(over)} on busy time exceed the peak they divide by: that peak is "
                "a measured rate (or a datasheet's), not a proven bound, and this stage ran faster."
            )
        for why in ((analytic or {}).get(s["stage"], {}) or {}).get("not_counted", []):
            notes.append(f"{s['stage']}: no analytic FLOPs (so no MFU): {why}.")
        notes += flop_notes(s)
        if "flops_tensor_ranges" in s and np.isfinite(s["flops_tensor_ranges"]):
            notes.append(
                f"{s['stage']}: range replay counted {s['flops_tensor_ranges']:.4g} tensor FLOPs and "
                f"{s['dram_bytes_ranges']:.4g} DRAM bytes; per-kernel results give "
                f"{s['flops_tensor_measured']:.4g} and {s['dram_bytes_measured']:.4g} (a range keeps data in "
                "L2 from one kernel to the next; kernel replay flushes the caches before each kernel)."
            )
    return notes


def flop_notes(s: pd.Series) -> list[str]:
    """Explain where a stage's measured (executed) FLOPs and its model FLOPs differ for a structural reason."""
    a, c, m, r = s["flops_analytic"], s["flops_analytic_causal"], s["flops_measured"], s["executed_over_model"]
    notes = []
    if np.isfinite(a) and np.isfinite(c) and a != c:
        measured = (
            f"; ncu measured {units.si(m, 'FLOP')} executed"
            if np.isfinite(m)
            else " (no hardware counters on this backend to compare with)"
        )
        notes.append(
            f"{s['stage']}: causal attention computes only the unmasked part: model FLOPs "
            f"{units.si(c, 'FLOP')} ({units.si(a, 'FLOP')} with attention in full){measured}."
        )
    if np.isfinite(r) and r > 1.2:
        notes.append(
            f"{s['stage']}: the GPU executed {r:.2f}x the model's FLOPs (HFU > MFU). Tensor-core "
            "instructions work on fixed tiles (Hopper wgmma: 64 rows, N of 8 or more; flash-attention "
            "kernels: blocks of 16-128 queries and keys), so a small dimension such as the few tokens of "
            "a decode step is padded and the padding is counted; the kernel table's FLOPs per launch "
            "show which kernels do it."
        )
    elif np.isfinite(r) and r < 0.8 and s["coverage"] >= FULL_COVERAGE:
        notes.append(
            f"{s['stage']}: ncu counted {r:.2f}x the model's FLOPs although every kernel was captured: "
            "part of the work runs on pipes the default metrics do not count (e.g. integer or FP8 "
            "without its metric), or the analytic count over-counts an operator."
        )
    return notes


def command_records(cmd_jsons: list[str | Path], ncu_bin: str) -> list[dict]:
    """The ncu capture and export commands behind a run's numbers, from the capture rule's records."""
    out = []
    for p in sorted(map(Path, cmd_jsons)):
        cmd = json.loads(p.read_text())
        out.append(
            {
                "what": f"ncu capture ({cmd.get('what', 'kernels')}, replay mode {cmd.get('replay_mode')})",
                "argv": cmd["argv"],
            }
        )
        out.append({"what": "export", "argv": ncu.export_argv(ncu_bin, Path(cmd["report"]).name)})
    return out


GEMM_SHORTFALL = 0.99  # measured GEMM FLOPs under this share of the model's: some were not counted


def diagnose(agg: RunTables, records: list[dict], manifest: dict | None = None) -> list[Diagnostic]:
    """The report's diagnostics: tool warnings, clock state, coverage and every number that is estimated
    rather than measured."""
    out = [Diagnostic("warning", "nsys", w) for w in (manifest or {}).get("warnings", [])]
    level = (manifest or {}).get("precision_level")
    if level:  # decided where the precision was (nsightflow.flops.matmul_precision)
        why = manifest["precision_why"]
        out.append(Diagnostic(level, "workload", f"MFU against the {agg.peaks.precision} peak: {why}"))
    for rec in records:
        src = f"ncu capture ({rec.get('what', 'kernels')})"
        out += [Diagnostic("warning", src, w) for w in rec.get("warnings", [])]
        if rec.get("tensor_precisions") and set(rec["tensor_precisions"]) != set(ncu.ALL_PRECISIONS):
            out.append(
                Diagnostic(
                    "info",
                    src,
                    f"tensor FLOPs collected for {', '.join(rec['tensor_precisions'])}: the precisions of every "
                    "GEMM and attention operator the workload ran (config ncu.tensor_precisions: all collects "
                    "every one)" + "".join(f"; {how}" for how in rec.get("precisions_how", []) if "graph" in how),
                )
            )
        if rec.get("non_tensor_flops") is False:
            seen = rec.get("precisions_seen")
            on_tensor_cores = seen is not None and SIMT not in seen
            out.append(
                Diagnostic(
                    "info" if on_tensor_cores else "warning",
                    src,
                    "FLOPs outside the tensor pipes not collected"
                    + (
                        " (elementwise kernels' work: every GEMM and attention ran on tensor cores)"
                        if on_tensor_cores
                        else (
                            " although GEMMs or attentions ran on the FMA units for "
                            f"{rec['simt_share'] * 100:.2g}% of a stage's analytic FLOPs at most (below the 0.5% "
                            "that pays for the counts): HFU is a lower "
                            "bound by about that share"
                        )
                        if rec.get("simt_share") is not None
                        else " although GEMMs or attentions may run outside the tensor cores: HFU is a lower bound"
                    )
                    + "; HFU, executed / model and kernel rates use the tensor pipes' FLOPs; 'FLOPs (ncu)' shows — "
                    "(config ncu.non_tensor_flops: true collects them, at about 0.3 s per profiled launch)",
                )
            )
    clocks = {rec.get("clock_control") for rec in records}
    if "none" in clocks:
        out.append(
            Diagnostic(
                "info",
                "ncu",
                "clocks not locked (clock_control none): the GPU ran at its own clocks; "
                "counts do not depend on clocks, and times come from the nsys timeline",
            )
        )
    if "base" in clocks:
        out.append(
            Diagnostic(
                "info",
                "ncu",
                "clocks locked to base by ncu (clock_control base): ncu durations are "
                "slower than a normal run; times come from the nsys timeline",
            )
        )
    for key in ("compute", "dram"):
        src = agg.peaks.source(key)
        if not src.startswith(("ncu", "measured")):
            out.append(Diagnostic("estimate", "peaks", f"{key} peak not measured: {src}"))
    for _, st in agg.stages.iterrows():
        cov = st.get("coverage")
        if cov is not None and np.isfinite(cov) and cov < FULL_COVERAGE:
            out.append(
                Diagnostic(
                    "warning",
                    st["stage"],
                    f"counters cover {cov:.1%} of the stage's GPU time; FLOPs "
                    "and bytes of the rest are not measured (HFU and bandwidth are lower bounds)",
                )
            )
        got, model = st.get("flops_measured_gemm", np.nan), st.get("flops_analytic_gemm", np.nan)
        if np.isfinite(got) and np.isfinite(model) and got < GEMM_SHORTFALL * model:
            out.append(
                Diagnostic(
                    "warning",
                    st["stage"],
                    f"the GEMM kernels measured {got:.4g} FLOPs, fewer than the model's {model:.4g} (a GEMM "
                    "executes at least its 2·M·N·K): tensor work in a precision ncu did not collect? Set "
                    "ncu.tensor_precisions: all",
                )
            )
        if np.isfinite(st.get("bytes_analytic", np.nan)):
            out.append(
                Diagnostic(
                    "estimate",
                    st["stage"],
                    "bytes touched by operators are a lower bound computed from tensor sizes, not a measurement",
                )
            )
    return out + agg.estimates
