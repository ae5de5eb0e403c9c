"""The Nsight backend's aggregation: the attributed nsys timeline, the ncu capture joined to its plan, the analytic
count and the measured ceilings, checked against one another (nsightflow.analysis.checks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsightflow.analysis import metrics, ranks
from nsightflow.analysis.aggregate import (
    RunTables,
    kernel_results,
    load_analytic,
    peaks_for,
    program_wall,
    tables,
    with_timed_run,
)
from nsightflow.analysis.checks import (
    check_analytic,
    check_bounds,
    check_dram_floor,
    check_durations,
    check_gemm_floor,
    check_kernel_records,
    check_peaks,
    check_result_rates,
    check_streams,
)
from nsightflow.analysis.diagnostics import MODE_TEXT, note, stage_notes, wall_note
from nsightflow.analysis.experts import routing_table
from nsightflow.analysis.focus import Focus
from nsightflow.analysis.steps import step_table, stood_in_shares
from nsightflow.capture.read import attribution, ncu_csv
from nsightflow.capture.read.matching import match_to_plan
from nsightflow.capture.read.plan import CapturePlan, chosen_pairs, expected_frame
from nsightflow.errors import InputError
from nsightflow.precisions import SIMT
from nsightflow.records import CaptureRecord, Ceilings, Diagnostic, Manifest


@dataclass(frozen=True)
class NsightInputs:
    """One Nsight run's files as the aggregate rule is given them: the nsys export, the plan and ncu's raw CSV of its
    capture, the analytic count, and where the run has them the measured ceilings, the manifest (its timed walls,
    ranks, warm-up steps) and a range capture with its plan (config ``ncu.ranges``)."""

    sqlite: Path
    plan: Path
    export: Path
    flops: Path
    ceilings: Path | None = None
    manifest: Path | None = None
    ranges_export: Path | None = None
    ranges_plan: Path | None = None

    @classmethod
    def of(cls, given: Any) -> NsightInputs:
        """A rule's named inputs (``ranges`` and ``ranges_plan`` only with config ``ncu.ranges``)."""

        def opt(name: str) -> Path | None:
            value = given.get(name)
            return Path(value) if value else None

        files = (Path(given.sqlite), Path(given.plan), Path(given.export), Path(given.flops))
        return cls(*files, opt("ceilings"), opt("manifest"), opt("ranges"), opt("ranges_plan"))


def aggregate_run(
    run: NsightInputs, domain: str, precision: str, focus: Focus, capture_record: CaptureRecord | None = None
) -> RunTables:
    """Per-class, per-kernel and per-stage tables of one Nsight run, plus peaks, notes and estimates. Wall times are
    the timed pass's in the run's manifest (the program unslowed by nsys) where it has one. The inputs are checked
    against one another (nsightflow.analysis.checks); ``capture_record`` (capture.cmd.json) says which counters ncu
    collected."""
    tl = attribution.read_timeline(run.sqlite, domain)
    plan = CapturePlan.read(run.plan)
    raw, _ = ncu_csv.parse_raw_csv(run.export)
    matched = match_to_plan(kernel_results(raw, run.export), expected_frame(plan), run.export.name)
    check_durations(matched, tl.launches, str(run.export))
    check_streams(tl.launches[tl.launches["pass_"] == "ranged"], str(run.sqlite))
    check_kernel_records(tl.launches[tl.launches["pass_"] == "ranged"], str(run.sqlite))
    analytic = load_analytic(run.flops)
    check_analytic(analytic, attribution.stage_table(tl), str(run.flops), tl.probe_calls)
    ceiling = Ceilings.read(run.ceilings) if run.ceilings else None
    device = (
        next(iter(raw["device__attribute_display_name"].dropna()), None)
        if "device__attribute_display_name" in raw.columns
        else None
    )
    pk = peaks_for(matched, device or tl.gpu_name, precision, ceiling)
    check_peaks(pk, str(run.export))
    check_result_rates(matched, str(run.export))
    check_dram_floor(matched, caches_flushed(capture_record), str(run.export))
    wall = program_wall(run.manifest)
    classes, kernels, stages, per_step = tables(
        tl, matched, chosen_pairs(plan), analytic, pk, focus, plan.mode == "representatives", wall
    )
    notes = [note("capture", f"{MODE_TEXT[plan.mode]}."), wall_note(wall[0], "nsys", tl.probe_stands_in, stages)]
    estimates = []
    stood = stood_in_shares(per_step)
    for stage, s in plan.stages.items():
        text = f"{s.profiled} of {s.launches} launches profiled ({s.classes} classes of identical launches)"
        if s.steps > 1:
            before = s.steps_profiled_before
            text += (
                f", in steps {s.sampled_steps} of {s.steps}"
                + (f" and {s.extra_steps} (launch sequences no sampled step has)" if s.extra_steps else "")
                + (
                    f"; step(s) {before} launched only calls profiled in an earlier step, so none of theirs was"
                    if before
                    else ""
                )
                + "; the other steps scaled launch by launch from the same calls, or from the sampled steps' launch "
                "at the same position"
            )
        if stood.get(stage, 0.0) > 0:
            text += (
                f"; {stood[stage]:.1%} of its GPU time is in operator calls profiled in no step (shapes no profiled "
                "step had: a serving iteration's batch, a growing cache), which take the counters of the launch at "
                "their position in the profiled steps of the same launch sequence: estimates"
            )
        notes.append(note(stage, f"{text}."))
        if s.profiled < s.launches:
            estimates.append(Diagnostic("estimate", stage, text))
    whole = [w for w in plan.windows if w.units is None and plan.mode == "representatives"]
    for w in whole:
        notes.append(note(w.stage, f"step {w.step}: {w.why}."))
    if run.ranges_export and run.ranges_plan:
        stages = with_range_totals(stages, run.ranges_export, run.ranges_plan, tl)
    stages = with_timed_run(stages, run.manifest)
    notes += stage_notes(stages, analytic)
    check_bounds(stages, pk)
    check_gemm_floor(stages, str(run.flops), every_precision_collected(capture_record))
    manifest = Manifest.read(run.manifest) if run.manifest else Manifest()
    per_rank = ranks.rank_table(ranks.rank_launches(run.sqlite, domain), manifest) if manifest.ranks else ranks.empty()
    notes += ranks.rank_notes(per_rank, manifest)
    return RunTables(
        kernels,
        stages,
        pk,
        notes,
        estimates,
        classes,
        matched,
        per_rank,
        experts=routing_table(analytic),
        steps=step_table(manifest, analytic, pk, per_step),
    )


def every_precision_collected(record: CaptureRecord | None) -> bool:
    """Whether a capture collected the FLOPs of every precision its GEMMs and attentions ran in: then measured GEMM
    FLOPs below the model's cannot be explained by a counter left out."""
    if record is None or record.precisions_seen is None or not record.tensor_precisions:
        return False
    seen = set(record.precisions_seen)
    return seen - {SIMT} <= set(record.tensor_precisions) and (SIMT not in seen or bool(record.non_tensor_flops))


def caches_flushed(record: CaptureRecord | None) -> bool:
    """Whether ncu flushed the caches before each kernel it measured (``--cache-control all``, also its default
    when the argv names none); False where no record says how the capture ran."""
    if record is None or not record.argv:
        return False
    given = [a.split("=", 1)[1] for a in record.argv if a.startswith("--cache-control=")]
    return not given or given[-1] == "all"


def range_results(export: str | Path, plan_json: str | Path) -> pd.DataFrame:
    """One row per range window of a range-replay capture: stage, step and the window's counter totals."""
    raw, _ = ncu_csv.parse_raw_csv(Path(export))
    plan = CapturePlan.read(plan_json)
    if len(raw) != len(plan.windows):
        raise InputError(f"{export}: {len(raw)} range results, the range plan has {len(plan.windows)} windows")
    res = ncu_csv.result_metrics(raw).sort_values("ncu_id").reset_index(drop=True)
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
    per = metrics.strict(res.groupby("stage")[["flops_tensor", "dram_bytes"]], "mean")
    per = per.rename(columns={"flops_tensor": "tensor", "dram_bytes": "dram"})
    out = stages.copy()
    out["flops_tensor_ranges"] = [per.loc[s, "tensor"] * n[s] if s in per.index else np.nan for s in out["stage"]]
    out["dram_bytes_ranges"] = [per.loc[s, "dram"] * n[s] if s in per.index else np.nan for s in out["stage"]]
    return out
