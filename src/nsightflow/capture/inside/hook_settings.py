"""What the hook (nsightflow.capture.inside.hook) does in one run of a command: its settings, carried as JSON in the
program's environment so that every Python process the command starts (torchrun's ranks) loads them."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from nsightflow.errors import RecordError

HOOK_ENV = "NSIGHTFLOW_HOOK"  # the variable that carries HookSettings into a command's program
JOB_ENV = "NSIGHTFLOW_JOB"  # 'pid:start ticks' of the job that launched a command (the hook ends with it)
HookMode = Literal["timed", "probe", "ranged", "ncu", "torch", "count"]


@dataclass(frozen=True)
class HookSettings:
    """What the hook does in one run of a command, passed as JSON in ``NSIGHTFLOW_HOOK``."""

    mode: HookMode
    out: str | None  # the hook's record of the run (JSON); None: none
    domain: str | None = None  # the stages' NVTX domain ('' the default domain); None: record every range (timed)
    stages: list[str] | None = None  # stage range names; None: the domain's top-level ranges
    mirror: str = "nsightflow"  # nsightflow's domain for mirrored steps (the harness's)
    labels: dict[str, str] = field(default_factory=dict)  # stage -> torch trace label (mode torch)
    dtype: str | None = None  # the workload's declared dtype (ties in the precision MFU divides by)
    flops_out: str | None = None
    ceilings_out: str | None = None
    windows: str | None = None  # capture plan (mode ncu)
    await_windows: bool = False  # mode ncu: the plan is made while the program starts; wait for it at the first step
    trace: str | None = None  # Chrome trace (mode torch); another rank's: trace_path(trace, rank)
    rank: int = 0  # in a job of several processes: the rank that is probed, counted and captured
    gate: str | None = None  # a launch beside another (nsightflow.capture.inside.gate): probe waits there, timed for it
    gate_pid: int | None = None  # mode timed: the process of the gated launch (it may end before it is ready)
    # mode timed: other launches gated beside it (their gate -> the process that runs them), each waited for too
    also_gated: dict[str, int] = field(default_factory=dict)
    # where both launches stop beside each other: "start" (before the program's first line) or "contact" (before its
    # first contact with what they share: the GPU, a process, a port; nsightflow.capture.inside.gate.Contacts)
    gate_at: Literal["start", "contact"] = "start"
    skip: dict[str, list[int]] = field(default_factory=dict)  # stage -> its warm-up steps (ordinals): followed only
    steps: dict[str, int] = field(default_factory=dict)  # stage -> steps to its last profiled one (torch: stop there)
    # the timed run's autotuning choices (nsightflow.capture.inside.hook_tuning), taken without timing in a profiled run
    tuning: dict[str, list[str]] | None = None
    # stage name -> 'module:qualname' of a function whose calls are its steps (nsightflow.capture.inside.hook_steps)
    step_functions: dict[str, str] = field(default_factory=dict)
    # stage name -> 'module:qualname' summarising each step's inputs, called in the timed run (hook_steps)
    step_inputs: dict[str, str] = field(default_factory=dict)
    # under nsys with --capture-range (a window): trace from the first profiled step to the last one (``steps``) only
    capture_range: bool = False
    # a window of a long run: a program that computes alone ends after its last profiled step (``steps``), its record
    # written (nothing after it is measured)
    end_after_steps: bool = False

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> HookSettings:
        try:
            return cls(**json.loads(text))
        except (json.JSONDecodeError, TypeError) as exc:
            raise RecordError(f"{HOOK_ENV}: not the settings of this nsightflow's hook ({exc}); unset it") from exc


def record_path(out: str | Path, pid: int) -> Path:
    """Where process ``pid`` writes its record of a run whose settings name ``out``."""
    out = Path(out)
    return out.with_name(f"{out.stem}.{pid}{out.suffix}")


def records_of(out: str | Path) -> list[Path]:
    """The records the processes of a run whose settings name ``out`` have written so far (:func:`record_path`),
    by name."""
    out = Path(out)
    mine = re.compile(rf"{re.escape(out.stem)}\.\d+{re.escape(out.suffix)}")
    return sorted(p for p in out.parent.glob(f"{out.stem}.*{out.suffix}") if mine.fullmatch(p.name))
