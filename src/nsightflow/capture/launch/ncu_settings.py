"""How one Nsight Compute run collects: the ``ncu:`` config keys a capture rule uses, as one frozen record.

Each capture rule (ncu_capture, ncu_ranges, ncu_deep) builds its own from the config, with the keys its kind of
capture fixes (a range's result sums kernels of any precision; the deep dive's sections bring their own metrics), and
passes it as one Snakemake param, a plain dict (Snakemake compares a param it can represent, not a dataclass): a change
to a key a rule uses reruns that rule, and only the rules that use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from nsightflow.capture.launch.ncu import CacheControl, ClockControl, ReplayMode
from nsightflow.ncu_metrics import MetricSpec, NonTensorFlops, TensorPrecisions


@dataclass(frozen=True)
class NcuSettings:
    """One ncu run's collection settings (config ``ncu:`` and ``tools.ncu``)."""

    ncu: str  # the ncu binary
    metrics: MetricSpec  # "default" (the report's, with the FLOP counters the plan needs), or a list
    extra_metrics: list[str] = field(default_factory=list)
    tensor_precisions: TensorPrecisions = "auto"  # which tensor FLOP counters: "auto" (what runs), "all", a list
    non_tensor_flops: NonTensorFlops = "auto"  # the SASS FLOP counts of CUDA cores
    sections: list[str] = field(default_factory=list)
    replay_mode: ReplayMode = "kernel"
    clock_control: ClockControl = "base"
    cache_control: CacheControl = "all"
    timeout_s: float | None = None
    ranges: bool = False  # one result per window (range replay), not one per planned launch

    @classmethod
    def of(cls, config: dict[str, Any], **fixed: Any) -> NcuSettings:
        """The settings from the workflow's ``config`` (validated: every key present), with ``fixed`` keys set by
        the rule's kind of capture."""
        c = config["ncu"]
        keys = {
            "ncu": config["tools"]["ncu"],
            "metrics": c["metrics"],
            "extra_metrics": c["extra_metrics"],
            "tensor_precisions": c["tensor_precisions"],
            "non_tensor_flops": c["non_tensor_flops"],
            "sections": c["sections"],
            "replay_mode": c["replay_mode"],
            "clock_control": c["clock_control"],
            "cache_control": c["cache_control"],
            "timeout_s": c["timeout_s"],
        }
        return cls(**{**keys, **fixed})

    def params(self) -> dict[str, Any]:
        """The settings as a rule's param (a dict Snakemake records and compares between runs)."""
        return asdict(self)

    @classmethod
    def from_params(cls, params: Any) -> NcuSettings:
        """The settings a rule's param (:meth:`params`) holds."""
        return cls(**dict(params))
