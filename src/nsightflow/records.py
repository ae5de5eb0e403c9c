"""The run files that pass between rules, as typed records: one frozen dataclass per file, each read and written
here alone, with a schema version, and checked on reading (a missing or mistyped key is named with its file and
the fix, never met later as a quiet ``.get`` default).

| file | record | written by | read by |
| --- | --- | --- | --- |
| ``analytic_flops.json`` | :class:`AnalyticCounts` | the harness (timeline, torch_profile) | capture, analysis |
| ``ceilings.json`` | :class:`Ceilings` | the harness | analysis (peaks) |
| ``imported/index.json`` | :class:`CapturesIndex` | import_captures | analysis (the user's files in errors) |
| ``manifest.json`` | :class:`Manifest` | the profiling rules | analysis, the pages |
| ``ncu/capture.cmd.json`` | :class:`CaptureRecord` | ncu_capture | analysis, diagnostics |
| ``plan.json`` | nsightflow.capture.read.plan.CapturePlan | plan | ncu_capture, analysis, the harness (windows) |
| ``summary.json`` | :class:`Summary` (:class:`Peaks`, :class:`Diagnostic`) | the aggregate rules | the pages |
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from nsightflow import files
from nsightflow.errors import RecordError

SCHEMA = 1  # every record file carries it; a newer one is refused, an older (absent: 0) one is read as it was

R = TypeVar("R", bound="_Record")


def load_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``, or an error naming the file and the rule that makes it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable {what} ({exc}); rerun the rule that makes it") from exc
    if not isinstance(data, dict):
        raise RecordError(f"{path}: a {what} is a JSON object, this is a {type(data).__name__}; rerun its rule")
    version = data.get("schema", 0)
    if not isinstance(version, int) or version > SCHEMA:
        raise RecordError(
            f"{path}: {what} schema {version!r}, newer than this nsightflow's {SCHEMA}: made by a newer version; "
            "update nsightflow or rerun the rule"
        )
    return data


class _Record:
    """read/write for a frozen dataclass record kept as one JSON object."""

    WHAT = "record"
    REQUIRED: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any], where: str = "") -> R:
        missing = [k for k in cls.REQUIRED if k not in data]
        if missing:
            raise RecordError(f"{where or cls.WHAT}: key(s) {missing} missing from the {cls.WHAT}; rerun its rule")
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def read(cls: type[R], path: str | Path) -> R:
        return cls.from_dict(load_object(path, cls.WHAT), str(path))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}  # type: ignore[call-overload]

    def write(self, path: str | Path) -> None:
        files.write_json(path, self.to_dict())


def _count(stage: str, key: str, value: Any, where: str) -> None:
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0):
        raise RecordError(
            f"{where}: stage {stage!r}: {key} is {value!r}; a count is a number of 0 or more (or null when it could "
            "not be made)"
        )


@dataclass(frozen=True)
class StageCount:
    """What the analytic count saw of one stage, over all its steps. FLOPs are None where part of the work was not
    counted (``not_counted`` says why)."""

    flops: float | None = None
    flops_causal_adjusted: float | None = None
    attention_flops_full: float | None = None
    causal_masked_flops: float | None = None
    by_class: dict[str, float] | None = None  # gemm, attention, other
    bytes_lower_bound: float | None = None
    repeats: int = 0  # steps counted
    calls: int | None = None  # operator calls dispatched (the timeline's probe pass marks as many); None: not said
    by_op: dict[str, float] = field(default_factory=dict)
    tensor_precisions: list[str] | None = None  # of the GEMMs and attentions; None: not all counted
    by_precision: dict[str, float] | None = None  # their FLOPs, by the precision of the first input
    graph_replays: int = 0
    not_counted: list[str] = field(default_factory=list)
    # operators named like matrix work (nsightflow.formulas.matrix_like) with no FLOP formula: calls each;
    # their FLOPs are missing from ``flops``, which counts the rest
    no_formula: dict[str, int] = field(default_factory=dict)
    # GEMMs and attentions with dimensions not multiples of the largest tensor-core tiles (formulas.padding): calls,
    # FLOPs, FLOPs padded, a shape; tile_bound: all so padded, padding's most. None: not looked for (an older count)
    padded: dict[str, dict[str, Any]] | None = None
    tile_bound: float | None = None
    # an MoE's routing: per step, per routing of its grouped GEMMs (an MoE layer of a forward pass), tokens per expert
    routing: list[list[list[int]]] = field(default_factory=list)
    # per step counted, in order: the model's FLOPs (causal attention's kept part) and bytes; None: not all counted
    step_flops: list[float] | None = None
    step_bytes: list[float] | None = None

    COUNTS = ("flops", "flops_causal_adjusted", "attention_flops_full", "causal_masked_flops", "bytes_lower_bound")

    @property
    def counted(self) -> bool:
        """Whether every operator of the stage was counted."""
        return self.tensor_precisions is not None and not self.not_counted

    @property
    def model_flops(self) -> float | None:
        """The model's FLOPs MFU divides: causal attention's kept part only."""
        return self.flops_causal_adjusted if self.flops_causal_adjusted is not None else self.flops


@dataclass(frozen=True)
class AnalyticCounts(_Record):
    """``analytic_flops.json``: the analytic count of every stage, from the probe pass."""

    stages: dict[str, StageCount] = field(default_factory=dict)
    method: str = ""

    WHAT = "analytic count (analytic_flops.json)"
    REQUIRED = ("stages",)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> AnalyticCounts:
        where = where or cls.WHAT
        raw = data.get("stages")
        if not isinstance(raw, dict):
            raise RecordError(f"{where}: not an analytic_flops.json with a 'stages' object; rerun the timeline rule")
        known = {f.name for f in fields(StageCount)}
        stages = {}
        for name, entry in raw.items():
            entry = entry or {}
            if not isinstance(entry, dict):
                raise RecordError(f"{where}: stage {name!r} is {entry!r}, not an object of counts")
            for key in StageCount.COUNTS:
                _count(name, key, entry.get(key), where)
            stages[str(name)] = StageCount(**{k: v for k, v in entry.items() if k in known})
        return cls(stages=stages, method=str(data.get("method", "")))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "stages": {n: asdict(s) for n, s in self.stages.items()}, "method": self.method}


@dataclass(frozen=True)
class Ceilings(_Record):
    """``ceilings.json``: the device's measured matmul rate (in the dtype of the workload's matrix work) and copy
    bandwidth, or why they could not be measured (``error``)."""

    device: str = ""
    dtype: str = ""
    device_name: str | None = None
    precision: str | None = None
    matmul_flops_per_s: float | None = None
    copy_bytes_per_s: float | None = None
    method: dict[str, str] = field(default_factory=dict)  # matmul, copy: how each was measured
    # every repetition's rate (FLOP/s, bytes/s), slowest first: the measurement's spread
    matmul_runs: list[float] = field(default_factory=list)
    copy_runs: list[float] = field(default_factory=list)
    threads: int | None = None  # torch's intra-op threads while measuring (the CPU)
    torch: str = ""
    error: str | None = None

    WHAT = "measured ceilings (ceilings.json)"

    @property
    def measured(self) -> bool:
        return self.error is None and self.matmul_flops_per_s is not None and self.copy_bytes_per_s is not None


@dataclass(frozen=True)
class CapturesIndex(_Record):
    """``imported/index.json``: what an import of captures made elsewhere recognised in the user's folder, by kind
    (nsightflow.capture.launch.imported), what it ignored, and the ncu exports in the order they were numbered."""

    directory: str
    recognised: dict[str, list[str]] = field(default_factory=dict)  # kind -> the user's files of that kind
    ignored: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)  # <n>.raw.csv is the n-th of these

    WHAT = "index of imported captures (index.json)"
    REQUIRED = ("directory",)


@dataclass(frozen=True)
class CaptureRecord(_Record):
    """``ncu/capture.cmd.json``: how the capture ran and which counters it collected, and why."""

    argv: list[str] = field(default_factory=list)
    what: str = "kernels"  # the plan's mode, or 'ranges'
    replay_mode: str = ""
    report: str = ""
    results: int = 0
    warnings: list[str] = field(default_factory=list)
    clock_control: str = ""
    tensor_precisions: list[str] | None = None  # collected (metrics 'default'); None: the user's own metrics
    non_tensor_flops: bool | None = None
    precisions_seen: list[str] | None = None  # by the probe pass; None: it could not tell
    precisions_how: list[str] = field(default_factory=list)
    simt_share: float | None = None
    set_aside: str | None = None  # why a first capture (of the program's first pass) was made again after a warm-up

    WHAT = "capture record (capture.cmd.json)"
    REQUIRED = ("argv", "report")


@dataclass(frozen=True)
class Manifest(_Record):
    """``manifest.json``: the harness's record of one launch (the workload, its passes' step times, the precision
    MFU divides by) with the settings, tool versions, host and commands behind the run."""

    callable: str = ""
    command: list[str] = field(default_factory=list)  # a command workload's argv (then callable is '')
    args: dict[str, Any] = field(default_factory=dict)
    domain: str = ""  # nsightflow's domain of the stage ranges in the timeline
    stage_domain: str | None = None  # a command's own NVTX domain of its stages, and how it was chosen
    stage_domain_how: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"
    precision: str = "unknown"
    precision_source: str = ""
    precision_level: str = ""
    precision_why: str = ""
    iterations: int = 1
    stages: list[dict[str, Any]] = field(default_factory=list)  # name, repeats, steps
    trace_labels: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    stage_wall_s: dict[str, list[float]] | None = None  # the ranged (profiled) pass's steps
    program_wall_s: dict[str, list[float]] | None = None  # the timed pass's: the program's own
    # peak memory per stage (nsightflow.capture.inside.memory): allocated, reserved (device), rss (host); a callable's
    # timed pass, a command's run under nsys or count run (nsightflow.capture.inside.hook_actions)
    program_memory: dict[str, dict[str, float]] | None = None
    analytic: dict[str, Any] | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # an analysis of captures made elsewhere: what was recognised (imported's index)
    captures: dict[str, Any] | None = None
    # a job of several processes: rank, pid, device, wall per stage
    ranks: list[dict[str, Any]] = field(default_factory=list)
    profiled_rank: int | None = None  # the rank whose stages ncu captures (None: one process)
    # what the harness's first warm-up pass did once that launches kernels (compilation, state made on first use):
    # none ([]) lets ncu's launch window the first pass (nsightflow.capture.launch.program.ncu_launches); None:
    # unknown
    first_pass_work: list[str] | None = None
    # the pass whose steps the timeline's stage ranges are: "ranged", or "probe" where the probe pass alone was traced
    # (nsightflow.capture.inside.passes.probe_stands_in; stage_wall_s is then None); "" where no harness said
    traced_pass: str = ""
    # a command's warm-up steps, set apart from its stages (nsightflow.capture.read.warmup): stage, step, wall_s, why
    warmup_steps: list[dict[str, Any]] = field(default_factory=list)
    every_wall_s: dict[str, list[float]] | None = None  # the timed run's every step, warm-up included (a command's)
    # each of those steps' pace (nsightflow.capture.launch.discovery.step_clocks; None: another stage's step came next)
    every_pace_s: dict[str, list[float | None]] | None = None
    analytic_how: str = ""  # how the analytic count was made (which run, with or without compilation)
    autotuning: dict[str, list[str]] = field(default_factory=dict)  # a command's timed run's (capture.hook_tuning)
    # a command's step functions: each step's inputs summarised (config step_inputs; None where unreadable), every
    # step as every_wall_s, and the first error of a summary per stage
    step_inputs: dict[str, list[dict[str, float] | None]] = field(default_factory=dict)
    step_inputs_errors: dict[str, str] = field(default_factory=dict)
    # what the program printed of its own numbers in its timed run (nsightflow.capture.read.own_metrics)
    program_metrics: dict[str, Any] = field(default_factory=dict)

    WHAT = "run manifest (manifest.json)"  # an older one, without a precision, gets none: no peak, never a wrong one


DiagnosticLevel = Literal["note", "warning", "estimate", "info"]
LEVELS: tuple[DiagnosticLevel, ...] = ("note", "warning", "estimate", "info")


@dataclass(frozen=True)
class Diagnostic:
    """One fact a reader must know to read a run's numbers, made where the fact is known and said once (never parsed
    back from prose). ``note``: how to read a stage's numbers (the run page's notes); ``warning``: a tool's warning or
    a number that is incomplete; ``estimate``: a number derived rather than measured; ``info``: how it was measured."""

    level: DiagnosticLevel
    source: str  # the stage, the tool, "peaks", or "" where the fact is the run's
    message: str

    @property
    def text(self) -> str:
        """The fact as one sentence, its source first."""
        return f"{self.source}: {self.message}" if self.source else self.message


@dataclass(frozen=True)
class Peaks:
    """The denominators of every utilisation, each with where it comes from (ncu, measured, datasheet); made by
    nsightflow.analysis.peaks."""

    precision: str
    device_name: str | None
    compute: float  # FLOP/s
    compute_source: str
    dram: float  # bytes/s
    dram_source: str
    sm_hz: float = math.nan
    dram_hz: float = math.nan
    ceiling_compute: float | None = None  # measured matmul rate, beside ncu's peak
    ceiling_dram: float | None = None  # measured copy bandwidth
    ceiling_source: str | None = None
    datasheet_compute: float | None = None
    datasheet_dram: float | None = None
    datasheet_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As summary.json holds it (absent optional values left out; the device's name is kept, null where
        nothing named it)."""
        return {k: v for k, v in asdict(self).items() if v is not None or k == "device_name"}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "peaks") -> Peaks:
        missing = [k for k in ("precision", "compute", "compute_source", "dram", "dram_source") if k not in data]
        if missing:
            raise RecordError(f"{where}: key(s) {missing} missing from the peaks; rerun the aggregate rule")
        return cls(**{"device_name": None, **{f.name: data[f.name] for f in fields(cls) if f.name in data}})

    def source(self, which: str) -> str:
        """Where the ``compute`` or ``dram`` peak comes from."""
        return str(getattr(self, f"{which}_source") or "")


@dataclass(frozen=True)
class Summary(_Record):
    """``summary.json``: a run's peaks, what a reader must know of its numbers (notes and diagnostics, one list), the
    ncu commands behind them, and for a job of several processes its per-rank rows (nsightflow.analysis.ranks)."""

    peaks: Peaks
    diagnostics: list[Diagnostic] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)

    WHAT = "run summary (summary.json)"

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> Summary:
        where = where or cls.WHAT
        if not isinstance(data.get("peaks"), dict):
            raise RecordError(f"{where}: no 'peaks' object; rerun the aggregate rule")
        items = [Diagnostic("note", "", str(n)) for n in data.get("notes", [])]  # written before notes were records
        for d in data.get("diagnostics", []):
            if not isinstance(d, dict) or d.get("level") not in LEVELS or not {"source", "message"} <= d.keys():
                raise RecordError(
                    f"{where}: diagnostic {d!r} is not {{level: one of {list(LEVELS)}, source, message}}; rerun the "
                    "aggregate rule"
                )
            items.append(Diagnostic(d["level"], str(d["source"]), str(d["message"])))
        return cls(
            Peaks.from_dict(data["peaks"], f"{where}: peaks"),
            items,
            list(data.get("commands", [])),
            list(data.get("ranks") or []),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "peaks": self.peaks.to_dict(),
            "diagnostics": [asdict(d) for d in self.diagnostics],
            "commands": self.commands,
            "ranks": self.ranks,
        }

    def write(self, path: str | Path) -> None:
        # numpy numbers from the tables as JSON numbers (not strings), NaN as NaN, as pandas reads it back
        files.write_text(path, json.dumps(self.to_dict(), indent=2, default=float))

    def notes(self) -> list[str]:
        """The notes (how to read the numbers), as sentences."""
        return [d.text for d in self.diagnostics if d.level == "note"]


def trace_path(trace: str | Path, rank: int | None, profiled: int = 0) -> Path:
    """Where a rank's torch.profiler trace goes: the profiled rank's (or a lone process's) at ``trace``, another's
    beside it as ``<stem>.rank<N><suffix>``."""
    trace = Path(trace)
    return trace if rank is None or rank == profiled else trace.with_name(f"{trace.stem}.rank{rank}{trace.suffix}")
