"""The user's API: a workload is a :class:`Workload` of :class:`Stage` items, returned by a callable
``package.module:function`` named in the config (``callable:``) with keyword arguments (``args:``).

A ``Workload`` has a ``setup`` that resets state (KV caches) and ordered stages, each a function of its step index run
``repeats`` times per iteration, for ``iterations`` iterations (a training loop: forward, backward, optimizer,
again). A stage's step index counts every time it runs. nsightflow's harness (nsightflow.capture.inside.harness) runs it
under the profilers; nothing here imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nsightflow.errors import WorkloadError

__all__ = ["Stage", "Workload", "WorkloadError", "build_workload", "load_callable", "require_sizes", "steps"]


@dataclass
class Stage:
    """One NVTX-ranged stage: ``fn(step)`` is called ``repeats`` times per iteration."""

    name: str
    fn: Callable[[int], Any]
    repeats: int = 1


@dataclass
class Workload:
    setup: Callable[[], None]
    stages: list[Stage]
    device: str = "cpu"
    # The dtype of the model's matrix work, where the probe pass cannot tell: MFU divides by the peak of the
    # precision most GEMM and attention FLOPs ran in (nsightflow.precisions.matmul_precision).
    dtype: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    iterations: int = 1


def require_sizes(**sizes: object) -> None:
    """Raise ValueError naming each size that is not a whole number of 1 or more: a zero batch, prompt or layer
    count makes a workload of no work whose every rate is 0 or undefined, not a measurement."""
    bad = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
    if bad:
        raise ValueError(
            f"sizes {', '.join(f'{k}={v!r}' for k, v in bad.items())}: each must be a whole number of 1 or more"
        )


def load_callable(spec: str) -> Callable[..., Workload]:
    """Import ``package.module:function``; raise WorkloadError naming the spec and the fix."""
    if ":" not in spec:
        raise WorkloadError(f"workload callable {spec!r} is not of the form 'package.module:function'")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or any error raised while the module imports
        raise WorkloadError(
            f"workload callable {spec!r}: importing module {module_name!r} failed: {exc!r}. "
            "Check the module name and that it is importable from the workflow's Python (PYTHONPATH)."
        ) from exc
    try:
        fn = getattr(module, attr)
    except AttributeError as exc:
        raise WorkloadError(f"workload callable {spec!r}: module {module_name!r} has no attribute {attr!r}") from exc
    if not callable(fn):
        raise WorkloadError(f"workload callable {spec!r} is not callable")
    return fn


def build_workload(spec: str, args: dict[str, Any]) -> Workload:
    fn = load_callable(spec)
    try:
        workload = fn(**args)
    except Exception as exc:
        raise WorkloadError(f"workload callable {spec!r} raised while building with {args}: {exc!r}") from exc
    if not isinstance(workload, Workload) or not workload.stages:
        raise WorkloadError(
            f"workload callable {spec!r} returned {type(workload).__name__}, not a nsightflow.workloads.Workload "
            "with at least one Stage"
        )
    names = [s.name for s in workload.stages]
    bad_names = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad_names:
        raise WorkloadError(
            f"workload callable {spec!r}: stage name(s) {bad_names!r}: a stage's name is a non-empty string "
            "(it names NVTX ranges, table rows and files)"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise WorkloadError(
            f"workload callable {spec!r}: stage name(s) {twice} used twice; stages are reported by "
            "name, so each needs its own"
        )
    bad = [
        f"{s.name!r} repeats {s.repeats}"
        for s in workload.stages
        if not (isinstance(s.repeats, int) and s.repeats >= 1)
    ]
    if bad or not (isinstance(workload.iterations, int) and workload.iterations >= 1):
        raise WorkloadError(
            f"workload callable {spec!r}: every stage runs at least once: "
            f"{', '.join(bad) or f'iterations {workload.iterations}'}; use a whole number of 1 or more"
        )
    return workload


def steps(workload: Workload) -> list[tuple[Stage, int]]:
    """Every (stage, step index) in the order they run: iteration-major, then stage order, then repeats."""
    out = []
    for it in range(workload.iterations):
        for stage in workload.stages:
            out += [(stage, it * stage.repeats + r) for r in range(stage.repeats)]
    return out


def step_counts(workload: Workload) -> dict[str, int]:
    return {s.name: s.repeats * workload.iterations for s in workload.stages}


def weight_bytes(model: Any) -> int:
    """Bytes of a model's parameters and buffers (its weights, as they sit in memory)."""
    tensors = [*model.parameters(), *model.buffers()]
    return int(sum(t.numel() * t.element_size() for t in tensors))
