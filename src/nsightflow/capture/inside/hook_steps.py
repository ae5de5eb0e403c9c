"""Steps from a function: a command whose steps are the calls of a function it names (config ``step_functions``: a
stage name for each ``module:qualname``), such as a serving engine's per-iteration forward, where no range a user
can add says where a step begins and ends.

Each named function is wrapped when its module is imported (an import hook, as nsightflow.capture.inside.hook_tuning
does for inductor): every call is a range of :data:`nsightflow.domains.AUTO_DOMAIN` named after its stage, followed by
the hook as the program's own push/pop ranges (never emitted to NVTX; the nsys launch mirrors each step in
nsightflow's domain). A call made inside another call of a step function is part of that step. Frames that
``torch.compile`` traces call the function unwrapped, so compiled code is unchanged. The function must live in a
module the program imports (a script run as ``__main__`` is not imported).
"""

from __future__ import annotations

import functools
import sys
import threading
from types import ModuleType
from typing import Any

from nsightflow.capture.inside.after_import import patch_on_import
from nsightflow.domains import AUTO_DOMAIN


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def _owner(module: Any, qualname: str) -> tuple[Any, str]:
    """Where ``qualname`` (``Class.method`` or ``function``) lives in ``module``: its owner and its last name;
    AttributeError where a part is missing."""
    *path, attr = qualname.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    getattr(owner, attr)
    return owner, attr


class StepFunctions:
    """The step functions of one process: stage name by ``module:qualname``, and which ones were wrapped."""

    def __init__(self, tracker: Any, functions: dict[str, str], inputs: dict[str, str] | None = None) -> None:
        self.tracker = tracker
        self.inputs = StepInputs(inputs or {}) if inputs and tracker.s.mode == "timed" else None
        self.by_module: dict[str, dict[str, str]] = {}  # module -> qualname -> stage
        for stage, where in functions.items():
            module, _, qualname = where.partition(":")
            self.by_module.setdefault(module, {})[qualname] = stage
        self.wrapped: list[str] = []
        self.local = threading.local()  # per thread: whether a step function's call is open

    def wrap(self, module: ModuleType) -> None:
        """Wrap the step functions ``module`` defines (each once; one not found is said on stderr)."""
        for qualname, stage in self.by_module.get(module.__name__, {}).items():
            try:
                owner, attr = _owner(module, qualname)
            except AttributeError:
                sys.stderr.write(f"[nsightflow] step function {module.__name__}:{qualname} not found in its module\n")
                continue
            fn = getattr(owner, attr)
            if getattr(fn, "__nsightflow_step__", None) is not None:
                continue
            setattr(owner, attr, self._step(fn, stage))
            self.wrapped.append(f"{module.__name__}:{qualname}")

    def _step(self, fn: Any, stage: str) -> Any:
        tracker, local = self.tracker, self.local

        @functools.wraps(fn)
        def step(*args: Any, **kwargs: Any) -> Any:
            if _compiling() or getattr(local, "open", False):
                return fn(*args, **kwargs)
            local.open = True
            if self.inputs is not None:  # the timed run: what the step is given, before it runs
                self.inputs.summarise(stage, args, kwargs)
            tracker.push(AUTO_DOMAIN, stage)
            try:
                return fn(*args, **kwargs)
            finally:
                tracker.pop(AUTO_DOMAIN)
                local.open = False

        step.__nsightflow_step__ = stage  # type: ignore[attr-defined]
        return step


class StepInputs:
    """Each step's inputs summarised (config ``step_inputs``: stage -> ``module:qualname`` of a function called with
    the step's arguments, returning a flat dict of numbers: requests, prefill and decode tokens, KV length), in the
    timed run only. A summary that fails or is not such a dict is None for that step, its first error kept: a batch
    mix that cannot be read is never made up."""

    def __init__(self, where: dict[str, str]) -> None:
        self.where = where
        self.functions: dict[str, Any] = {}
        self.steps: dict[str, list[dict[str, float] | None]] = {}
        self.errors: dict[str, str] = {}

    def summarise(self, stage: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if stage not in self.where:
            return
        summary: dict[str, float] | None = None
        try:
            if stage not in self.functions:
                import importlib

                module, _, qualname = self.where[stage].partition(":")
                owner, attr = _owner(importlib.import_module(module), qualname)
                self.functions[stage] = getattr(owner, attr)
            got = self.functions[stage](*args, **kwargs)
            ok = isinstance(got, dict) and all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in got.items()
            )
            if not ok:
                raise TypeError(f"returned {type(got).__name__} {str(got)[:200]}, not a dict of names to numbers")
            summary = {k: float(v) for k, v in got.items()}
        except Exception as exc:  # the program runs on; the step's summary is missing, and says why
            self.errors.setdefault(stage, f"{self.where[stage]}: {type(exc).__name__}: {exc}"[:500])
        self.steps.setdefault(stage, []).append(summary)

    def record(self) -> dict[str, Any]:
        return {"step_inputs": self.steps, "step_inputs_errors": self.errors}


def install(tracker: Any, functions: dict[str, str], inputs: dict[str, str] | None = None) -> StepFunctions:
    """Follow the calls of ``functions`` (stage name -> ``module:qualname``) as ``tracker``'s steps, each one's
    inputs summarised by ``inputs`` (stage -> ``module:qualname``) in the timed run."""
    steps = StepFunctions(tracker, functions, inputs)
    patch_on_import(dict.fromkeys(steps.by_module, steps.wrap))
    return steps
