"""Autotuning decided once: the timed run's choices taken, without timing, in the profiled runs of a command.

Inductor's Triton kernels pick their configuration (block sizes, warps, stages) by timing candidates at their first
call: among a kernel's configs (``CachingAutotuner.benchmark_all_configs``) and, where the program turns it on as
gpt-fast does, by coordinate descent around the pick (``CoordescTuner.autotune``). Under a profiler every candidate
is timed slowed (ncu serialises and instruments each launch), so ncu's run of the program picks other blocks than
the timeline's run and launches kernels the timeline never saw. The choice is made again in every process where torch
does not find it cached: a warm cache re-runs coordinate descent in torch 2.11 (pytorch/pytorch#172819).

So the timed run (no profiler) records each autotuner's choice, and the nsys, ncu and torch.profiler runs take it
instead of timing: every run launches the kernels the program chose when it ran plainly. A kernel the record does
not name (another shape, code the timed run did not reach) is tuned as usual. The patches are made when inductor's
modules are imported (an import hook), so a program that never compiles imports nothing more.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from nsightflow.capture.inside.after_import import patch_on_import

HEURISTICS = "torch._inductor.runtime.triton_heuristics"
COORDESC = "torch._inductor.runtime.coordinate_descent_tuner"
FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # a triton.Config's fields beside its kwargs


def signature(config: Any) -> str:
    """A Triton config as text that names the kernel it makes: its block sizes and launch fields, sorted."""
    fields = {k: getattr(config, k) for k in FIELDS if getattr(config, k, None) is not None}
    return json.dumps({"kwargs": dict(config.kwargs), **fields}, sort_keys=True, default=str)


def _config(baseline: Any, sig: str) -> Any:
    """``baseline`` (a triton.Config) with the block sizes and fields of ``sig``."""
    want = json.loads(sig)
    out = copy.deepcopy(baseline)
    out.kwargs = dict(want.pop("kwargs"))
    for k, v in want.items():
        setattr(out, k, v)
    return out


class Tuning:
    """The choices one process made (``record``) or takes (``choices`` given): autotuner key → its picks in order."""

    def __init__(self, choices: dict[str, list[str]] | None) -> None:
        self.replay = choices is not None
        self.choices: dict[str, list[str]] = {k: list(v) for k, v in (choices or {}).items()}
        self.taken: dict[str, int] = {}
        self.lock = threading.Lock()

    def made(self, key: str, sig: str) -> None:
        with self.lock:
            self.choices.setdefault(key, []).append(sig)

    def take(self, key: str) -> str | None:
        """The recorded pick for this call of the autotuner ``key`` (its n-th call takes the n-th pick, the last one
        once there are no more); None where the record has none."""
        with self.lock:
            picks = self.choices.get(key)
            if not picks:
                return None
            n = self.taken.get(key, 0)
            self.taken[key] = n + 1
            return picks[min(n, len(picks) - 1)]

    def take_choices(self, choices: dict[str, list[str]]) -> None:
        """Take ``choices`` from now on (a probe launch learns them at its gate, after install)."""
        with self.lock:
            self.choices = {k: list(v) for k, v in choices.items()}
            self.taken.clear()

    def record(self) -> dict[str, list[str]]:
        with self.lock:
            return {k: list(v) for k, v in self.choices.items()}


def _key(kind: str, name: Any, size_hints: Any, configs: list[Any]) -> str:
    return json.dumps([kind, str(name), str(size_hints), sorted(signature(c) for c in configs)])


def patch_heuristics(module: ModuleType, tuning: Tuning) -> None:
    """``CachingAutotuner.benchmark_all_configs``: timed and recorded, or the recorded pick made the fastest."""
    cls = module.CachingAutotuner
    timed: Callable[..., dict[Any, float]] = cls.benchmark_all_configs

    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> dict[Any, float]:
        launchers = list(self.launchers)
        key = _key("configs", getattr(self.fn, "__name__", ""), self.size_hints, [x.config for x in launchers])
        if tuning.replay:
            pick = tuning.take(key)
            sigs = [signature(x.config) for x in launchers]
            if pick in sigs:  # the recorded pick the fastest, every other slower: no candidate launched
                return {x: (1.0 if s == pick else 2.0) for x, s in zip(launchers, sigs, strict=True)}
        timings = timed(self, *args, **kwargs)
        if not tuning.replay and timings:
            tuning.made(key, signature(min(timings, key=timings.__getitem__).config))
        return timings

    cls.benchmark_all_configs = benchmark_all_configs


def patch_coordesc(module: ModuleType, tuning: Tuning) -> None:
    """``CoordescTuner.autotune``: searched and recorded, or the recorded result returned without a launch."""
    cls = module.CoordescTuner
    search: Callable[..., Any] = cls.autotune

    def autotune(self: Any, func: Any, baseline_config: Any, *args: Any, **kwargs: Any) -> Any:
        key = _key("coordesc", getattr(self, "name", ""), getattr(self, "size_hints", None), [baseline_config])
        if tuning.replay:
            pick = tuning.take(key)
            if pick is not None:
                return _config(baseline_config, pick)
        best = search(self, func, baseline_config, *args, **kwargs)
        if not tuning.replay:
            tuning.made(key, signature(best))
        return best

    cls.autotune = autotune


PATCHES: dict[str, Callable[[ModuleType, Tuning], None]] = {HEURISTICS: patch_heuristics, COORDESC: patch_coordesc}


def _bound(patch: Callable[[ModuleType, Tuning], None], tuning: Tuning) -> Callable[[ModuleType], None]:
    return lambda module: patch(module, tuning)


def install(choices: dict[str, list[str]] | None) -> Tuning:
    """Record this process's autotuning choices (``choices`` None), or take ``choices`` in place of timing."""
    tuning = Tuning(choices)
    patch_on_import({name: _bound(patch, tuning) for name, patch in PATCHES.items()})
    return tuning
