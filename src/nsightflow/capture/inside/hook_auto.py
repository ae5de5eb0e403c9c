"""Stages of a command that opens no NVTX range: what the hook (nsightflow.capture.inside.hook) sees without the
user's help.

Inside the program, three kinds of step are followed as synthetic ranges of :data:`nsightflow.domains.AUTO_DOMAIN`
(never emitted to NVTX; the hook treats them as the program's own push/pop ranges):

- ``iteration``: a training iteration, from the first top-level module call with gradients on (after the program's
  start or the previous optimizer step) to the end of the next ``optimizer.step()``: forward, backward and the
  optimizer inside, gradient accumulation's several forwards included;
- ``inference <shape>``: a top-level module call with gradients off (an evaluation pass, a prefill, a decode step),
  named by its first tensor argument's shape so that a prefill and a decode step are two stages;
- ``forward <shape>``: a top-level module call with gradients on where no optimizer ever steps.

A top-level call is a module call made while no other module call is open on that thread. The hooks are installed
only where the stages are automatic or not known yet, and removed at the program's first range of its own (global
module hooks take every module call off torch's fast path). Frames that
``torch.compile`` traces see nothing of this (``torch.compiler.is_compiling()``), so compiled code is unchanged.
nsightflow.capture.launch.discovery picks the stages from these ranges only where the program opened none of its own.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from nsightflow.domains import AUTO_DOMAIN

ITERATION = "iteration"


def shape_of(args: tuple[Any, ...]) -> str | None:
    """``AxB`` for the first tensor among ``args`` (its shape), None when there is none."""
    import torch

    for a in args:
        if isinstance(a, torch.Tensor):
            return "x".join(str(n) for n in a.shape) or "scalar"
    return None


class AutoStages:
    """Follows top-level module calls and optimizer steps as ranges of ``AUTO_DOMAIN`` on ``tracker`` (a
    nsightflow.capture.inside.hook.Tracker: its ``push``/``pop``, its settings' ``stages`` once known)."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.local = threading.local()  # per thread: the module calls open, and whether each pushed a range
        self.iteration: int | None = None  # the thread whose iteration is open
        self.handles: list[Any] = []  # the global hooks' handles (removed once the program opens a range)

    def remove(self) -> None:
        """Stop following: the program has ranges of its own, and a module call goes back to torch's fast path."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def _stack(self) -> list[bool]:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def name(self, kind: str, shape: str | None) -> str:
        """The stage name of a top-level call: shaped, unless the known stages hold only the plain kind."""
        shaped = f"{kind} {shape}" if shape else kind
        stages = self.tracker.s.stages
        return kind if stages is not None and shaped not in stages and kind in stages else shaped

    def pre(self, module: Any, args: tuple[Any, ...]) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        stack = self._stack()
        pushed = False
        if not stack and self.tracker.follows_auto():
            grad = torch.is_grad_enabled()
            if grad and self.iteration is None:
                self.iteration = threading.get_ident()
                self.tracker.push(AUTO_DOMAIN, ITERATION)
            self.tracker.push(AUTO_DOMAIN, self.name("forward" if grad else "inference", shape_of(args)))
            pushed = True
        stack.append(pushed)

    def post(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        stack = self._stack()
        if stack and stack.pop():
            self.tracker.pop(AUTO_DOMAIN)

    def stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import torch

        if torch.compiler.is_compiling() or self.iteration != threading.get_ident():
            return
        self.iteration = None
        self.tracker.pop(AUTO_DOMAIN)


def install(tracker: Any) -> AutoStages | None:
    """Register the global module and optimizer hooks that follow ``tracker``'s automatic stages (None: no torch)."""
    try:
        from torch.nn.modules import module as nn_module
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        return None
    auto = AutoStages(tracker)
    auto.handles = [
        nn_module.register_module_forward_pre_hook(auto.pre),
        nn_module.register_module_forward_hook(auto.post, always_call=True),
        register_optimizer_step_post_hook(auto.stepped),
    ]
    # torch warns that global hooks fire once more for an OptimizedModule: nsightflow's count only the outer call
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
    return auto
