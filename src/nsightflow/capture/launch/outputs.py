"""What a profiling launch is given beside its program: the files it writes next to its capture and the settings of
the run (typed records crossing from the rules to either kind of program, nsightflow.capture.launch.program)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProfileOutputs:
    """The files every profiling launch writes beside its capture: the run's manifest, the analytic count, the
    measured ceilings, and the rule's log."""

    manifest: Path
    flops: Path
    ceilings: Path
    log: Path

    @classmethod
    def of(cls, manifest: str | Path, flops: str | Path, ceilings: str | Path, log: str | Path) -> ProfileOutputs:
        return cls(Path(manifest), Path(flops), Path(ceilings), Path(log))


@dataclass(frozen=True)
class RunSettings:
    """What the manifest records of the run (tool versions, the config values that shape it), how long one program
    launch may take (config ``timeout_s``; None: no limit), and what was started beside it."""

    versions: dict[str, Any]
    settings: dict[str, Any]
    timeout_s: float | None = None
    # launches started with this one and held at their gates (gate -> pid: ncu's, nsightflow.capture.launch.together),
    # which a command's timed run waits for too before its program starts
    also_gated: dict[str, int] = field(default_factory=dict)
