"""What a run's tables dwell on: the kernel classes kept by name (config ``select``) and when a stage's device time
is said to diverge from its wall time (config ``report.divergence``). One settings object built per rule, so a change
reruns only the aggregation rules, which take it as a params dict Snakemake compares."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Focus:
    """``top_n``: at most this many kernel classes named (None: no cap); ``coverage``: or as many as cover this share
    of device time (None: no share); ``divergence``: a stage whose device is busy for less than this share of its wall
    time is flagged (its wall is the host's, not the GPU's)."""

    top_n: int | None
    coverage: float | None
    divergence: float

    @classmethod
    def of(cls, config: dict[str, Any]) -> Focus:
        """From a validated config (its schema holds the defaults)."""
        select = config["select"]
        return cls(select["top_n"], select["coverage"], config["report"]["divergence"])

    def params(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_params(cls, params: Any) -> Focus:
        return cls(**dict(params))
