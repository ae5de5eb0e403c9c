"""Rule ncu_capture (and ncu_ranges, cards): one Nsight Compute run of the whole program, windowed by its plan,
retried after the program's warm-up should its first pass differ from the plan, exported to raw CSV and checked
against the plan before anything is published."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nsightflow import files
from nsightflow.capture import ncu, ncu_csv
from nsightflow.capture.harness import Launch
from nsightflow.capture.matching import match_to_plan
from nsightflow.capture.plan import CapturePlan, expected_frame
from nsightflow.capture.progress import LaunchProgress
from nsightflow.capture.tools import append_log, require, run_tool
from nsightflow.errors import CaptureError, MatchError, ToolError
from nsightflow.records import AnalyticCounts, CaptureRecord

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Counters:
    """Which FLOP counters a capture collects, and why (each tensor precision costs a replay pass; the SASS
    counts of non-tensor FLOPs an instrumented run of every profiled launch)."""

    precisions: list[str]
    non_tensor: bool
    seen: list[str] | None  # the GEMM and attention precisions the probe pass saw; None: it could not tell
    simt_share: float | None = None  # largest share of a stage's analytic FLOPs in FMA-unit GEMMs and attentions
    seen_how: list[str] = field(default_factory=list)  # per stage, where its precisions came from


def capture_counters(
    precisions: ncu.TensorPrecisions, non_tensor: ncu.NonTensorFlops, flops_json: str | Path, plan_json: str | Path
) -> Counters:
    """The FLOP counters of a run's capture (config ``ncu.tensor_precisions``, ``ncu.non_tensor_flops``), from
    the GEMM and attention operators the probe pass saw in the planned stages
    (nsightflow.capture.ncu.seen_precisions)."""
    plan = CapturePlan.read(plan_json)
    analytic = AnalyticCounts.read(flops_json)
    seen, how = ncu.seen_precisions(analytic, [(e["stage"], int(e["unit"])) for e in plan.expected])
    share = ncu.simt_share(analytic, list(plan.stages))
    return Counters(
        ncu.tensor_precisions(precisions, seen), ncu.non_tensor_flops(non_tensor, seen, share), seen, share, how
    )


def ncu_capture(
    ncu_bin: str,
    plan_json: str | Path,
    programs: list[Launch],
    rep: str | Path,
    csv_out: str | Path,
    cmd_json: str | Path,
    log: str | Path,
    *,
    metrics: ncu.MetricSpec,
    extra_metrics: list[str],
    counters: Counters,
    sections: list[str],
    replay_mode: ncu.ReplayMode,
    clock_control: ncu.ClockControl,
    cache_control: ncu.CacheControl,
    timeout_s: float | None,
    ranges: bool = False,
    details_out: str | Path | None = None,
) -> None:
    """One ncu run of the whole program (``--profile-from-start off``; the program, the harness or a command's hook,
    opens the plan's windows), exported to raw CSV and checked against the plan before anything is published: every
    planned launch profiled, nothing else, in order, with matching grid, block and name (ranges: one result per
    window). ``programs``: launches to try in order (nsightflow.capture.command.program_launches): a capture that
    differs from the plan is made again with the next one; the last one's difference is the error. The default
    metrics collect the FLOP counters ``counters`` names."""
    plan = CapturePlan.read(plan_json)
    rep = Path(rep)
    tmp_base = rep.with_name(rep.name.removesuffix(".ncu-rep") + ".tmp")
    produced = Path(str(tmp_base) + ".ncu-rep")
    expected = len(plan.windows) if ranges else len(plan.expected)
    what = (
        f"{len(plan.windows)} range windows"
        if ranges
        else f"{expected} planned launches in {len(plan.windows)} windows ({plan.mode})"
    )
    tries = programs[-1:] if ranges else programs
    set_aside = None
    for i, program in enumerate(tries):
        argv = ncu.capture_argv(
            ncu_bin,
            tmp_base,
            program.argv,
            metrics=ncu.resolve_metrics(
                metrics, extra_metrics, counters.precisions, non_tensor=counters.non_tensor, ranges=ranges
            ),
            sections=sections,
            replay_mode=replay_mode,
            clock_control=clock_control,
            cache_control=cache_control,
            comm_filter=plan.communicates(),
        )
        progress = None if ranges else LaunchProgress(f"ncu {Path(log).parent.parent}", plan.expected)
        out, rc = run_tool(
            argv,
            log,
            timeout_s,
            check=False,
            gpu=True,
            on_line=progress,
            env=program.env,
            cwd=program.cwd,
            gpus=program.gpus,
        )
        try:
            text, raw = _checked_capture(ncu_bin, out, rc, produced, log, what, expected, plan, rep.name, ranges)
            break
        except (CaptureError, MatchError) as exc:
            if i == len(tries) - 1 or not (isinstance(exc, MatchError) or ncu.differs_from_plan(out, rc, expected)):
                raise
            set_aside = str(exc).splitlines()[0][:500]
            note = (
                f"[nsightflow] the capture of the program's first pass differs from the plan ({set_aside}): "
                "that pass is not the program's steady state; capturing again after its warm-up passes"
            )
            print(note, file=sys.stderr, flush=True)
            with open(log, "a") as fh:
                fh.write(f"\n{note}\n")
    record = CaptureRecord(
        argv=argv,
        what="ranges" if ranges else plan.mode,
        replay_mode=replay_mode,
        report=rep.name,
        results=len(raw),
        warnings=ncu.warnings(out),
        clock_control=clock_control,
        tensor_precisions=counters.precisions if metrics == "default" else None,
        non_tensor_flops=counters.non_tensor if metrics == "default" else None,
        precisions_seen=counters.seen,
        precisions_how=counters.seen_how,
        simt_share=counters.simt_share,
        set_aside=set_aside,
    )
    files.write_text(Path(csv_out), text)
    if details_out is not None:  # the sections as ncu prints them, with its rule messages
        files.write_text(Path(details_out), export(ncu_bin, produced, log, page="details"))
    record.write(cmd_json)
    files.publish(produced, rep)


def _checked_capture(
    ncu_bin: str,
    out: str,
    rc: int,
    produced: Path,
    log: str | Path,
    what: str,
    expected: int,
    plan: CapturePlan,
    name: str,
    ranges: bool,
) -> tuple[str, pd.DataFrame]:
    """The raw CSV export of a capture and its parsed table, once the capture is checked against its plan."""
    ncu.check_capture(out, rc, what=what, expected=expected)
    if not produced.exists():
        raise ToolError(f"ncu wrote no report for {what}; log: {log}")
    text = export(ncu_bin, produced, log)
    raw, _ = ncu_csv.parse_raw_csv(text, f"the raw export of {name}")
    if ranges:
        if len(raw) != expected:
            raise ToolError(f"range capture: {len(raw)} results for {expected} windows; log: {log}")
    else:
        match_to_plan(ncu_csv.result_metrics(raw), expected_frame(plan), name)  # raises on any disagreement
    return text, raw


def export(ncu_bin: str, rep: str | Path, log: str | Path, page: str = "raw") -> str:
    """``ncu --import --page raw --csv --print-units base`` of a report: the CSV text (checked to parse); with
    ``page='details'`` the details page as ncu prints it, rule messages included."""
    argv = ncu.export_argv(ncu_bin, rep) if page == "raw" else ncu.details_argv(ncu_bin, rep)
    require(ncu_bin)
    proc = subprocess.run(argv, capture_output=True, text=True)
    append_log(log, argv, proc.stderr + f"\n[nsightflow] exit code {proc.returncode}\n")
    if proc.returncode != 0:
        raise ToolError(f"ncu --import failed with {proc.returncode}; log: {log}")
    if page == "raw":
        ncu_csv.parse_raw_csv(proc.stdout, f"the raw export of {Path(rep).name}")  # raises on a malformed export
    return proc.stdout
