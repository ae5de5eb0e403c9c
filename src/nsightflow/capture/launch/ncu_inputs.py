"""What one Nsight Compute capture is given: its files, where its plan comes from (made from the timeline in the
capture's own job, or given), and which FLOP counters it collects (each tensor precision costs a replay pass)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsightflow import ncu_metrics
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.precisions import tensor_precision
from nsightflow.records import AnalyticCounts

if TYPE_CHECKING:
    from nsightflow.capture.read.plan import CaptureMode, CapturePlan


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
    precisions: ncu_metrics.TensorPrecisions,
    non_tensor: ncu_metrics.NonTensorFlops,
    flops_json: str | Path,
    plan: str | Path | CapturePlan,
) -> Counters:
    """The FLOP counters of a run's capture (config ``ncu.tensor_precisions``, ``ncu.non_tensor_flops``), from
    the GEMM and attention operators the probe pass saw in the planned stages
    (nsightflow.ncu_metrics.seen_precisions). ``plan``: the capture plan, or its file."""
    if isinstance(plan, (str, Path)):
        plan = read_plan(plan)
    launches = [(e.stage, e.unit, e.class_key, e.kernel) for e in plan.expected]
    return _counters(precisions, non_tensor, AnalyticCounts.read(flops_json), launches, list(plan.stages))


def counters_before_plan(
    precisions: ncu_metrics.TensorPrecisions, non_tensor: ncu_metrics.NonTensorFlops, flops_json: str | Path
) -> Counters | None:
    """The counters ``capture_counters`` gives a plan that profiles operators of every stage the count saw, what a
    capture starts with while its plan is made; None where the count cannot tell what the plan will need (a stage
    not counted, or replaying CUDA graphs, whose launches fall between operators): that plan is made first."""
    analytic = AnalyticCounts.read(flops_json)
    if not analytic.stages or any(not e.counted or e.graph_replays for e in analytic.stages.values()):
        return None
    stages = list(analytic.stages)
    # (the planned launches' kernels are not known yet: one an operator without a formula launched asks for a replan)
    return _counters(precisions, non_tensor, analytic, [(stage, 1, "", "") for stage in stages], stages)


def counters_before_timeline(
    precisions: ncu_metrics.TensorPrecisions, non_tensor: ncu_metrics.NonTensorFlops, dtype: str | None
) -> Counters:
    """The counters an ncu launch started before its timeline starts with, the probe pass not having run yet: those
    of matrix work in the workload's declared ``dtype`` (config ``ncu.tensor_precisions`` where it names them), or
    in bfloat16 where it declares none (an LLM's usual precision; float32 as torch runs it by default, on the FMA
    units). A guess: the plan made after the timeline asks for the counters it needs, and a launch started with
    others is started again with them (nsightflow.capture.launch.ncu_capture)."""
    seen = [tensor_precision(dtype or "bfloat16", tf32=False)]
    return Counters(
        ncu_metrics.tensor_precisions(precisions, seen),
        ncu_metrics.non_tensor_flops(non_tensor, seen),
        seen,
        seen_how=[f"guessed before the timeline from the workload's dtype ({dtype or 'none declared: bfloat16'})"],
    )


def _counters(
    precisions: ncu_metrics.TensorPrecisions,
    non_tensor: ncu_metrics.NonTensorFlops,
    analytic: AnalyticCounts,
    launches: list[tuple[str, int, str, str]],
    stages: list[str],
) -> Counters:
    seen, how = ncu_metrics.seen_precisions(analytic, launches)
    share = ncu_metrics.simt_share(analytic, stages)
    return Counters(
        ncu_metrics.tensor_precisions(precisions, seen),
        ncu_metrics.non_tensor_flops(non_tensor, seen, share),
        seen,
        share,
        how,
    )


def plan_maker(
    sqlite: str | Path,
    domain: str,
    sample_steps: list[Any],
    mode: CaptureMode,
    log: str | Path,
    precisions: ncu_metrics.TensorPrecisions,
    non_tensor: ncu_metrics.NonTensorFlops,
    flops_json: str | Path,
) -> Callable[[Path], tuple[CapturePlan, Counters]]:
    """What ``ncu_capture`` calls to make the capture's plan from the timeline (nsightflow.capture.read.plan.make_plan),
    written where it says, and learn the FLOP counters it needs."""

    def make(plan_json: Path) -> tuple[CapturePlan, Counters]:
        from nsightflow.capture.read.plan import make_plan

        plan = make_plan(sqlite, domain, sample_steps, mode, plan_json, log)
        return plan, capture_counters(precisions, non_tensor, flops_json, plan)

    return make


@dataclass(frozen=True)
class CaptureFiles:
    """One ncu run's files: its plan (read where given, written where made), the report and its raw CSV export, the
    capture's record (capture.cmd.json), the job's log, and ncu's details page where the rule asks for it (cards)."""

    plan: Path
    rep: Path
    csv: Path
    cmd: Path
    log: Path
    details: Path | None = None

    @classmethod
    def of(cls, output: Any, given: Any, log: str | Path) -> CaptureFiles:
        """A capture rule's named outputs (``plan`` where it makes its plan), its inputs (``plan`` where given)."""
        details = output.get("details")
        plan = output.get("plan") or given.plan
        paths = (Path(plan), Path(output.rep), Path(output.csv), Path(output.cmd), Path(log))
        return cls(*paths, Path(details) if details else None)


@dataclass(frozen=True)
class PlanSource:
    """Where a capture's plan comes from: made in the capture's job from the timeline (``timeline``, its nsys export,
    with the stage domain, the sampled steps and the capture mode: rule ncu_capture), or given as a file (ncu_ranges,
    ncu_deep); and ``flops``, the analytic count its FLOP counters are chosen from."""

    flops: Path
    timeline: Path | None = None
    domain: str = ""
    sample_steps: tuple[Any, ...] = ()
    mode: CaptureMode = "representatives"

    @classmethod
    def of(cls, given: Any, output: Any, params: Any) -> PlanSource:
        """A capture rule's: made where the rule outputs its plan, given otherwise."""
        if not output.get("plan"):
            return cls(Path(given.flops))
        steps = tuple(params.sample_steps)
        return cls(Path(given.flops), Path(given.sqlite), params.domain, steps, params.mode)

    @property
    def made(self) -> bool:
        return self.timeline is not None

    def counters(self, settings: NcuSettings, plan_json: Path) -> Counters | None:
        """The FLOP counters the capture starts with: a made plan's, guessed before it exists (None: it is made
        first), or a given plan's."""
        given = (settings.tensor_precisions, settings.non_tensor_flops, self.flops)
        return capture_counters(*given, plan_json) if self.timeline is None else counters_before_plan(*given)

    def maker(self, settings: NcuSettings, log: Path) -> Callable[[Path], tuple[CapturePlan, Counters]] | None:
        """What makes the plan (None: given)."""
        if self.timeline is None:
            return None
        counted = (settings.tensor_precisions, settings.non_tensor_flops, self.flops)
        return plan_maker(self.timeline, self.domain, list(self.sample_steps), self.mode, log, *counted)


def read_plan(plan_json: str | Path) -> CapturePlan:
    """A plan file (the plan's module, with pandas, imported only when one is read)."""
    from nsightflow.capture.read.plan import CapturePlan

    return CapturePlan.read(plan_json)
