"""One Nsight Compute capture for a whole run: which launches to profile, and in which windows.

Launches are *identical* when the same operator call (name, tensor shapes, dtypes, strides, other
arguments: nsightflow.capture.inside.probe.signature) launched the same kernel with the same grid, block and shared
memory as its same-numbered launch; in the default decoder the layers repeat the same calls, so one
profiled launch per class stands for the rest. A kernel, grid and block alone are not enough: a GEMM's
K is not part of its launch configuration. A call identifies its work in every step of its stage, so a
class profiled in one sampled step is not profiled again in the next: a training loop's later iterations
and a decode step's GEMMs cost nothing more; what changes from step to step (attention over a growing
KV cache) is profiled in each sampled step.

For a stage that runs several steps (decode, iterations), the sampled steps are profiled; in the other
steps a launch takes its call's counters, or, where no call identifies it (a replayed CUDA graph,
compiled code), those of the launch at the same position in the sampled steps that launch the same
kernels in the same order (the same *structure*); a structure that no sampled step has gets its first
step profiled too. With ``mode='every_launch'`` every launch of the chosen steps is profiled instead
(for workloads where identical calls do different work, e.g. data-dependent routing).

Windows are stage steps of the probe pass (nsightflow.capture.inside.probe). A step whose probe pass launched exactly
the kernels of its ranged pass, in the same order, gets windows around the units (operators, gaps)
holding the first launch of each class; otherwise the whole step is one window and every launch of it
is profiled. The plan lists the launches ncu must profile, in order; the capture is checked against it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from nsightflow import files
from nsightflow.capture.read.attribution import Timeline, call_classes, read_timeline
from nsightflow.capture.read.comm import is_comm
from nsightflow.errors import ConfigError, PlanError, RecordError
from nsightflow.records import SCHEMA, load_object

# config ncu.capture: one launch per class of identical launches, or every launch of the sampled steps.
CaptureMode = Literal["representatives", "every_launch"]

MODES = ("representatives", "every_launch")


def resolve_steps(spec: list[Any], repeats: int) -> list[int]:
    """Decode steps to sample: items 'first', 'middle', 'last', 'every:K', or step indices."""
    steps: set[int] = set()
    for item in spec:
        if isinstance(item, int) and not isinstance(item, bool):
            if not 0 <= item < repeats:
                raise ConfigError(f"sample step {item} is outside 0..{repeats - 1}")
            steps.add(item)
        elif item == "first":
            steps.add(0)
        elif item == "middle":
            steps.add((repeats - 1) // 2)
        elif item == "last":
            steps.add(repeats - 1)
        elif isinstance(item, str) and item.startswith("every:") and item[6:].isdigit() and int(item[6:]) > 0:
            steps.update(range(0, repeats, int(item[6:])))
        else:
            raise ConfigError(f"sample step {item!r}: use 'first', 'middle', 'last', 'every:K' or a step index")
    return sorted(steps)


@dataclass
class PlannedLaunch:
    """One launch ncu must profile, in the plan's order: its stage step, the unit (operator call or gap) of the
    probe pass it lies in, its class of identical launches, its kernel and launch configuration, and its role
    ('representative' of its class, 'extra', or 'deep' in a deep-dive plan)."""

    stage: str
    step: int
    unit: int
    class_key: str
    kernel: str
    mangled: str
    grid: str
    block: str
    smem: int
    role: str


EXPECTED_COLUMNS = [f.name for f in fields(PlannedLaunch)]


@dataclass
class StagePlan:
    """What the plan chose in one stage: its steps in the timeline, the sampled ones and the extra ones (launch
    sequences no sampled step has), its launch sequences, launches and communication launches (None: a plan made
    before it counted them), and what it profiles: launches, classes, and the steps every call of which an earlier
    step profiled."""

    steps: int
    sampled_steps: list[int]
    extra_steps: list[int]
    structures: int
    launches: int
    comm_launches: int | None = None
    profiled: int = 0
    classes: int = 0
    steps_profiled_before: list[int] = field(default_factory=list)


@dataclass
class Window:
    """Profile these units of one stage step (``units`` None: the whole step)."""

    stage: str
    step: int
    units: list[int] | None
    why: str


@dataclass
class CapturePlan:
    """``plan.json`` (and the range and deep-dive plans): the windows ncu's run opens and the launches it must
    profile; written with the records' schema version and checked on reading (nsightflow.records)."""

    mode: CaptureMode
    domain: str
    windows: list[Window]
    expected: list[PlannedLaunch]  # launches ncu must profile, in order
    stages: dict[str, StagePlan] = field(default_factory=dict)

    def write(self, path: str | Path) -> None:
        files.write_json(path, {"schema": SCHEMA, **asdict(self)}, indent=1)

    def communicates(self) -> bool:
        """Whether a stage launched communication kernels (NCCL's) in the timeline; True where the plan does not say."""
        return not self.stages or any(s.comm_launches is None or s.comm_launches for s in self.stages.values())

    @classmethod
    def read(cls, path: str | Path) -> CapturePlan:
        data = load_object(path, "capture plan (plan.json)")
        fix = "rerun the plan rule (delete the file, or snakemake --forcerun plan)"
        for key in ("mode", "domain", "windows", "expected"):
            if key not in data:
                raise RecordError(f"{path}: key {key!r} missing from the capture plan; {fix}")
        missing = sorted({c for e in data["expected"] if isinstance(e, dict) for c in EXPECTED_COLUMNS if c not in e})
        if missing:
            raise RecordError(f"{path}: planned launches lack {missing}; {fix}")
        try:
            windows = [Window(**w) for w in data["windows"]]
            expected = [PlannedLaunch(**e) for e in data["expected"]]
            stages = {str(k): StagePlan(**v) for k, v in (data.get("stages") or {}).items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise RecordError(f"{path}: a window, planned launch or stage is malformed ({exc}); {fix}") from exc
        return cls(data["mode"], data["domain"], windows, expected, stages)


def _stage_order(tl: Timeline) -> list[str]:
    return list(dict.fromkeys(tl.ranges.sort_values("start")["stage"]))


def chosen_steps(tl: Timeline, stage: str, sample_steps: list[Any]) -> tuple[list[int], list[int]]:
    """(sampled steps, extra steps) of a stage: the sampled ones, plus the first step of each structure
    (launch sequence) that no sampled step has."""
    ranges = tl.ranges[tl.ranges["stage"] == stage].sort_values("start")
    all_steps = ranges["step"].tolist()
    sampled = [all_steps[i] for i in resolve_steps(sample_steps, len(all_steps))] if len(all_steps) > 1 else all_steps
    ranged = tl.launches[(tl.launches["pass_"] == "ranged") & (tl.launches["stage"] == stage)]
    structure = ranged.drop_duplicates("step").set_index("step")["structure"]
    have = {structure.get(s) for s in sampled}
    extra = []
    for step in all_steps:
        st = structure.get(step)
        if st is not None and st not in have:
            extra.append(step)
            have.add(st)
    return sampled, extra


def plan_capture(tl: Timeline, domain: str, sample_steps: list[Any], mode: CaptureMode) -> CapturePlan:
    """The capture plan of one run from its attributed timeline."""
    if mode not in MODES:
        raise PlanError(f"capture mode {mode!r}: use one of {', '.join(MODES)}")
    check_stages(tl)
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    probe = tl.launches[tl.launches["pass_"] == "probe"]
    chosen: set[tuple[str, int]] = set()
    summary: dict[str, StagePlan] = {}
    for stage in _stage_order(tl):
        mine = ranged[ranged["stage"] == stage]
        sampled, extra = chosen_steps(tl, stage, sample_steps)
        chosen |= {(stage, s) for s in sampled + extra}
        summary[stage] = StagePlan(
            steps=int(tl.ranges["stage"].eq(stage).sum()),
            sampled_steps=sampled,
            extra_steps=extra,
            structures=int(mine["structure"].nunique()),
            launches=int(len(mine)),
            comm_launches=int(is_comm(mine["kernel"]).sum()),
        )
    windows: list[Window] = []
    expected: list[PlannedLaunch] = []
    # Operator calls already profiled in an earlier chosen step of the stage: the same call does the same work in
    # every step (a training loop's iterations, a decode step's GEMMs), so a later step profiles only what is new.
    profiled_calls: dict[str, set[str]] = {stage: set() for stage in summary}
    for stage, step in tl.ranges.sort_values("start")[["stage", "step"]].itertuples(index=False):
        if (stage, step) not in chosen:
            continue
        r = ranged[(ranged["stage"] == stage) & (ranged["step"] == step)].sort_values("seq")
        p = probe[(probe["stage"] == stage) & (probe["step"] == step)].sort_values("seq")
        r, p = r[~is_comm(r["kernel"])], p[~is_comm(p["kernel"])]  # never profiled (nsightflow.capture.read.comm)
        known = profiled_calls[stage] if mode == "representatives" else set()
        window, rows = _window(stage, int(step), r, p, mode, known)
        if window is None:
            summary[stage].steps_profiled_before.append(int(step))
            continue
        windows.append(window)
        seen: set[str] = set()
        for row in rows.to_dict("records"):
            row["role"] = "extra" if row["class_key"] in seen else "representative"
            seen.add(row["class_key"])
            expected.append(PlannedLaunch(**{c: _plain(row[c]) for c in EXPECTED_COLUMNS}))
        profiled_calls[stage] |= set(rows.loc[call_classes(rows), "class_key"])
    for stage, s in summary.items():
        planned = [e for e in expected if e.stage == stage]
        s.profiled = len(planned)
        s.classes = sum(1 for e in planned if e.role == "representative")
    return CapturePlan(mode=mode, domain=domain, windows=windows, expected=expected, stages=summary)


def chosen_pairs(plan: CapturePlan) -> set[tuple[str, int]]:
    """The (stage, step) pairs a plan chose to measure: its sampled steps and the extra ones (launch sequences no
    sampled step has), whether or not a step needed a window of its own."""
    return {(stage, int(step)) for stage, s in plan.stages.items() for step in s.sampled_steps + s.extra_steps} | {
        (w.stage, w.step) for w in plan.windows
    }


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _window(
    stage: str, step: int, ranged: pd.DataFrame, probe: pd.DataFrame, mode: str, known: set[str]
) -> tuple[Window | None, pd.DataFrame]:
    """The window of one stage step and the launches it profiles (in launch order); no window where every class
    of the step is an operator call in ``known`` (profiled in an earlier step of the stage)."""
    whole = ranged.assign(unit=-1)
    if mode == "every_launch":
        return Window(stage, step, None, "every launch of the step (capture mode every_launch)"), whole
    if probe.empty:
        return Window(stage, step, None, "no probe pass in the timeline: the whole step is profiled"), whole
    if (probe["unit"] < 0).any():
        return Window(
            stage,
            step,
            None,
            "operators of the probe pass overlapped in time (several threads "
            "dispatching at once): the whole step is profiled",
        ), whole
    if not bool(ranged["twin"].all()):
        diff = (Counter(probe["kernel_key"]) - Counter(ranged["kernel_key"])) + (
            Counter(ranged["kernel_key"]) - Counter(probe["kernel_key"])
        )
        what = (
            f"{sum(diff.values())} launches differ, e.g. {next(iter(diff)).split('|')[0][:80]}"
            if diff
            else "the same launches in another order"
        )
        return Window(
            stage,
            step,
            None,
            f"the probe pass launched other kernels than the ranged pass ({what}): the whole step is profiled",
        ), whole
    units: list[int] = []
    covered: set[str] = set(known)
    for cls, unit in zip(probe["class_key"], probe["unit"], strict=True):
        if cls not in covered:
            units.append(int(unit))
            covered |= set(probe.loc[probe["unit"] == unit, "class_key"])
    if not units:
        return None, probe.iloc[0:0]
    rows = probe[probe["unit"].isin(units)]
    new = rows["class_key"].nunique() - len(set(rows["class_key"]) & known)
    why = f"{new} classes in {len(units)} units"
    if known:
        why += f" ({len(set(probe['class_key']) & known)} operator calls of the step profiled in an earlier step)"
    return Window(stage, step, sorted(units), why), rows


def check_stages(tl: Timeline) -> None:
    """Fail before ncu runs when the timeline has no harness ranges, or a stage launched no kernel."""
    if tl.ranges.empty:
        raise PlanError(
            f"{tl.source}: the timeline has no NVTX range of the harness's domain: was it made by "
            "nsightflow's harness (config 'nvtx_domain'), with nsys profile --trace=cuda,nvtx?"
        )
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    idle = sorted(set(tl.ranges["stage"]) - set(ranged["stage"]))
    if idle:
        raise PlanError(
            f"no GPU kernels were launched inside the ranges of stage(s) {idle}, by any thread: the work "
            "runs outside the stage (in setup) or on the CPU; ncu would profile nothing."
        )


def expected_frame(plan: CapturePlan) -> pd.DataFrame:
    return pd.DataFrame([asdict(e) for e in plan.expected], columns=EXPECTED_COLUMNS)


def make_plan(
    sqlite: str | Path, domain: str, sample_steps: list[Any], mode: CaptureMode, plan_out: str | Path, log: str | Path
) -> CapturePlan:
    """Attribute the timeline and write the run's capture plan (nsightflow.capture.read.plan); the log says what it
    chose, after what it holds already (a plan made while ncu starts: ncu's command line, written first)."""
    tl = read_timeline(sqlite, domain)
    plan = plan_capture(tl, domain, sample_steps, mode)
    plan.write(plan_out)
    with open(log, "a") as fh:
        for stage, s in plan.stages.items():
            fh.write(
                f"{stage}: {s.launches} launches in {s.steps} step(s) of {s.structures} launch sequence(s); "
                f"profiling {s.profiled} ({s.classes} classes) in steps {s.sampled_steps} + {s.extra_steps}\n"
            )
            if s.steps_profiled_before:
                fh.write(f"{stage}: steps {s.steps_profiled_before} need no window: every call profiled before\n")
        for w in plan.windows:
            fh.write(f"window {w.stage} step {w.step}: {w.why}\n")
    return plan


def range_plan(sqlite: str | Path, domain: str, sample_steps: list[Any], plan_out: str | Path) -> CapturePlan:
    """Whole-step windows over the sampled steps: one range-replay result per window."""
    plan = plan_capture(read_timeline(sqlite, domain), domain, sample_steps, "every_launch")
    sampled = {(stage, step) for stage, s in plan.stages.items() for step in s.sampled_steps}
    plan.windows = [w for w in plan.windows if (w.stage, w.step) in sampled]
    plan.expected = []
    plan.write(plan_out)
    return plan
