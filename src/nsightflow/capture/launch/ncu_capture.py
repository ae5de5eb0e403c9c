"""Rule ncu_capture (and ncu_ranges, cards): one Nsight Compute run of the whole program, windowed by its plan,
retried after the program's warm-up should its first pass differ from the plan, exported to raw CSV and checked
against the plan before anything is published.

A plan made in the capture's own job is made while ncu starts the program (a callable's launch waits for it before
its windowed pass, a command's hook at the program's first step: ``Launch.awaits_plan``): on the 8B-shaped decoder
the job's imports and its plan took about 2 to 4 s before ncu could start, and ncu's start and the program's build 5
to 8 s. The launch starts with the FLOP counters a plan of every counted stage's operators needs; should the plan
made meanwhile need others, that launch is stopped before its first window and ncu starts again with them: the
capture is always the one its plan asks for.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from nsightflow import files, ncu_metrics
from nsightflow.capture.inside.harness import Launch
from nsightflow.capture.inside.progress import LaunchProgress
from nsightflow.capture.launch import ncu
from nsightflow.capture.launch.ncu_inputs import CaptureFiles, Counters, PlanSource, read_plan
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.capture.launch.tools import append_log, note, require, run_tool
from nsightflow.errors import CaptureError, MatchError, ToolError
from nsightflow.records import CaptureRecord

if TYPE_CHECKING:
    import pandas as pd

    from nsightflow.capture.read.plan import CapturePlan

# The plan, the export's parser and the match (pandas) are imported once ncu has started: importing them first cost
# the job about 0.8 to 1.2 s on the GPU host before the profiler could start.


class _Replan(Exception):
    """The plan made while ncu started needs other counters or another kernel filter than the launch started with."""


First = Callable[[dict[str, str], int], None]  # what runs before the plan is made, beside ncu's launch (env, pid)


class _Planner:
    """``beside`` of a capture's first launch (nsightflow.capture.launch.tools.run_tool): makes the plan while ncu
    starts the program, beside its final place (``staged``), and publishes it there only once the launch's command
    line is the one the plan asks for; otherwise it raises _Replan, and the launch, which never saw the plan, has
    opened no window when it is killed. ``first``: what must run before the plan can be made (the timeline, where
    ncu's launch starts with it: nsightflow.capture.launch.together), given the launch's environment and process."""

    def __init__(
        self,
        make: Callable[[Path], tuple[CapturePlan, Counters]],
        plan_json: str | Path,
        progress: LaunchProgress | None,
        argv_for: Callable[[Counters, bool], list[str]],
        started: list[str],
        guessed: Counters,
        guessed_comm: bool = False,
        first: First | None = None,
    ) -> None:
        self.make, self.plan_json, self.progress = make, Path(plan_json), progress
        self.staged = files.staging(plan_json)
        self.argv_for, self.started, self.guessed, self.guessed_comm = argv_for, started, guessed, guessed_comm
        self.first = first
        self.plan: CapturePlan | None = None
        self.counters: Counters | None = None
        self.wanted: list[str] = started

    def __call__(self, env: dict[str, str], pid: int) -> None:
        if self.first is not None:
            self.first(env, pid)
        self.plan, self.counters = self.make(self.staged)
        if self.progress is not None:
            self.progress.expected = [(e.stage, e.step) for e in self.plan.expected]
        comm = self.plan.communicates()
        self.wanted = self.argv_for(self.counters, comm)
        if self.wanted != self.started:
            raise _Replan(
                "the capture plan, made while ncu started, asks for other FLOP counters or kernel filter (started "
                f"with {_counted(self.guessed)}{_filtered(self.guessed_comm)}; the plan's {_counted(self.counters)}"
                f"{_filtered(comm)})"
            )
        self.publish()

    def publish(self) -> None:
        """Put the plan where the program waits for it."""
        files.publish(self.staged, self.plan_json)


def _counted(c: Counters) -> str:
    """Which FLOP counters, and why, in a line of the job's log."""
    seen = "could not tell" if c.seen is None else ", ".join(c.seen) or "none"
    how = f"; {'; '.join(c.seen_how)}" if c.seen_how else ""
    sass = "with" if c.non_tensor else "without"
    return f"tensor precisions {', '.join(c.precisions)}, {sass} the SASS counts (the probe saw: {seen}{how})"


def _filtered(comm: bool) -> str:
    return ", NCCL's kernels left out" if comm else ""


def ncu_capture(
    settings: NcuSettings,
    to: CaptureFiles,
    source: PlanSource,
    programs: list[Launch],
    first: First | None = None,
    guessed: Counters | None = None,
) -> None:
    """One ncu run of the whole program (``--profile-from-start off``; the program, the harness or a command's hook,
    opens the plan's windows), exported to raw CSV and checked against the plan before anything is published: every
    planned launch profiled, nothing else, in order, with matching grid, block and name (ranges: one result per
    window). ``programs``: launches to try in order (nsightflow.capture.launch.program.ncu_launches): a capture that
    differs from the plan is made again with the next one; the last one's difference is the error. The default
    metrics collect the FLOP counters the plan's operators need.

    A plan made here (``source``) is made while ncu starts the program where the first launch awaits its plan and
    the counters can be told before it (``counters_before_plan``): the launch starts with them, and the NCCL filter
    where its ranks have GPUs of their own, while the plan is made beside ``to.plan`` and put there once the launch
    is found to be the one the plan asks for (see the module's docstring); otherwise the plan is made before ncu
    starts. ``first``: what runs beside the first launch before its plan can be made (the timeline: its inputs do not
    exist yet), that launch started with the ``guessed`` counters and awaiting its plan."""
    s, ncu_bin, ranges = settings, settings.ncu, settings.ranges
    rep, log, plan_json = to.rep, to.log, to.plan
    tmp_base = rep.with_name(rep.name.removesuffix(".ncu-rep") + ".tmp")
    produced = Path(str(tmp_base) + ".ncu-rep")
    tries = programs[-1:] if ranges else programs
    counters = guessed if first is not None else source.counters(settings, plan_json)
    make_plan = source.maker(settings, log)
    assert first is None or (make_plan is not None and counters is not None and tries[0].awaits_plan), (
        "a launch started before its timeline starts with counters guessed and awaits its plan"
    )
    plan: CapturePlan | None = None
    if make_plan is not None:
        plan_json.unlink(missing_ok=True)  # a launch that awaits its plan must never read an older one
        if counters is None or not tries[0].awaits_plan:
            (plan, counters), make_plan = make_plan(plan_json), None
    else:
        plan = read_plan(plan_json)
    assert counters is not None, "a plan given needs its counters"

    def argv_for(program: Launch, chosen: Counters, comm_filter: bool) -> list[str]:
        return ncu.capture_argv(
            ncu_bin,
            tmp_base,
            program.argv,
            metrics=ncu_metrics.resolve_metrics(
                s.metrics, s.extra_metrics, chosen.precisions, non_tensor=chosen.non_tensor, ranges=ranges
            ),
            sections=s.sections,
            replay_mode=s.replay_mode,
            clock_control=s.clock_control,
            cache_control=s.cache_control,
            comm_filter=comm_filter,
        )

    def launch(
        argv: list[str], program: Launch, progress: LaunchProgress | None, beside: _Planner | None = None
    ) -> tuple[str, int]:
        return run_tool(
            argv,
            log,
            s.timeout_s,
            check=False,
            gpu=True,
            on_line=progress,
            env=program.env,
            cwd=program.cwd,
            gpus=program.gpus,
            beside=beside,
        )

    set_aside = None
    for i, program in enumerate(tries):
        where = [(e.stage, e.step) for e in plan.expected] if plan else []
        progress = None if ranges else LaunchProgress(f"ncu {Path(log).parent.parent}", where)
        if plan is None:  # this launch starts now, and its plan is made meanwhile
            assert make_plan is not None
            comm = program.gpus > 1  # ranks on GPUs of their own talk through NCCL: its kernels left out at once
            argv = argv_for(program, counters, comm)
            planner = _Planner(make_plan, plan_json, progress, partial(argv_for, program), argv, counters, comm, first)
            try:
                out, rc = launch(argv, program, progress, planner)
            except _Replan as exc:
                note(log, f"{exc}: ncu started again with them")
                planner.publish()
                argv = planner.wanted
                out, rc = launch(argv, program, progress)
            assert planner.plan is not None and planner.counters is not None  # made before the launch could end
            plan, counters = planner.plan, planner.counters
        else:
            argv = argv_for(program, counters, plan.communicates())
            out, rc = launch(argv, program, progress)
        expected = len(plan.windows) if ranges else len(plan.expected)
        what = (
            f"{len(plan.windows)} range windows"
            if ranges
            else f"{expected} planned launches in {len(plan.windows)} windows ({plan.mode})"
        )
        try:
            text, raw = _checked_capture(ncu_bin, out, rc, produced, log, what, expected, plan, rep.name, ranges)
            break
        except (CaptureError, MatchError) as exc:
            if i == len(tries) - 1 or not (isinstance(exc, MatchError) or ncu.differs_from_plan(out, rc, expected)):
                raise
            set_aside = str(exc).splitlines()[0][:500]
            note(
                log,
                f"the capture of the program's first pass differs from the plan ({set_aside}): that pass is not the "
                "program's steady state; capturing again after its warm-up passes",
            )
    assert plan is not None
    record = _record(s, argv, plan, raw, ncu.warnings(out), counters, set_aside, report=rep.name)
    _publish(s, to, produced, record, text)


def _record(
    s: NcuSettings,
    argv: list[str],
    plan: CapturePlan,
    raw: pd.DataFrame,
    warnings: list[str],
    counters: Counters,
    set_aside: str | None,
    report: str = "",
) -> CaptureRecord:
    """What a capture ran and collected (capture.cmd.json)."""
    return CaptureRecord(
        argv=argv,
        what="ranges" if s.ranges else plan.mode,
        replay_mode=s.replay_mode,
        report=report,
        results=len(raw),
        warnings=warnings,
        clock_control=s.clock_control,
        tensor_precisions=counters.precisions if s.metrics == "default" else None,
        non_tensor_flops=counters.non_tensor if s.metrics == "default" else None,
        precisions_seen=counters.seen,
        precisions_how=counters.seen_how,
        simt_share=counters.simt_share,
        set_aside=set_aside,
    )


def _publish(s: NcuSettings, out: CaptureFiles, produced: Path, record: CaptureRecord, text: str) -> None:
    """The export, the details page (the sections as ncu prints them, with its rule messages) where asked, the
    record, then the report: each moved into place whole."""
    files.write_text(out.csv, text)
    if out.details is not None:
        files.write_text(out.details, export(s.ncu, produced, out.log, page="details"))
    record.write(out.cmd)
    files.publish(produced, out.rep)


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
    from nsightflow.capture.read import ncu_csv
    from nsightflow.capture.read.matching import match_to_plan
    from nsightflow.capture.read.plan import expected_frame

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
    from nsightflow.capture.read import ncu_csv

    argv = ncu_csv.export_argv(ncu_bin, rep) if page == "raw" else ncu_csv.details_argv(ncu_bin, rep)
    require(ncu_bin)
    proc = subprocess.run(argv, capture_output=True, text=True)
    append_log(log, argv, proc.stderr + f"\n[nsightflow] exit code {proc.returncode}\n")
    if proc.returncode != 0:
        raise ToolError(f"ncu --import failed with {proc.returncode}; log: {log}")
    if page == "raw":
        ncu_csv.parse_raw_csv(proc.stdout, f"the raw export of {Path(rep).name}")  # raises on a malformed export
    return proc.stdout
