"""The probe pass: every operator of a stage step numbered, marked, counted, and (under ncu) windowed.

ncu's own filters cannot ask for "one launch of each distinct kernel, grid, block and shared memory,
in each sampled step" (``--filter-mode per-launch-config`` ignores the kernel's name; ``--kernel-id``
takes one invocation number for every function). So the harness decides: ncu runs with
``--profile-from-start off``, and the probe pass opens ``cudaProfilerStart/Stop`` windows around
exactly the *units* whose kernels the plan needs. A unit is one operator (``2·i + 1`` for the step's
i-th operator) or the gap before one (``2·i``: work launched between operators, e.g. a CUDA-graph
replay or compiled code). Views (``func.is_view``: aliases of their input, no kernel) are no operators
here: about 40% of a decoder's calls, unnumbered, unmarked and uncounted. Profiler windows are
process-wide, so kernels launched by autograd's own thread inside a backward operator are captured too.

In the timeline run the same pass marks each operator with an NVTX range (domain ``<domain>.ops``,
message = the call's signature, payload = its index in the step) and each step with a range in
``<domain>.probe``: the SQLite export then says which unit, and which call, launched each kernel, and
the plan is made from that (nsightflow.capture.read.plan).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsightflow.capture.inside.callkey import DATA_DEPENDENT, call_key
from nsightflow.capture.inside.flops import Tally
from nsightflow.domains import ops_domain
from nsightflow.formulas import op_name

WHOLE = None  # a window over the whole step
FLEX_EAGER = "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG"


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        shape = ",".join(map(str, x.shape))
        strides = "" if x.is_contiguous() else ":" + ",".join(map(str, x.stride()))
        return f"{str(x.dtype).removeprefix('torch.')}[{shape}{strides}]"
    if isinstance(x, (list, tuple)):
        return "(" + ",".join(_describe(y) for y in x) + ")"
    if x is None or isinstance(x, (bool, int, float, str)):
        return repr(x)
    return type(x).__name__


def signature(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], instance: int = 0) -> str:
    """An operator call's identity: its name and a digest of its arguments (tensor shapes, dtypes and
    strides; other values as written). Two launches of one kernel with one grid can still do different work
    (a GEMM's K is not in its launch configuration); launches of equal calls do the same, except for the
    operators in DATA_DEPENDENT, whose every call (``instance``, unique in the process) is its own."""
    name = op_name(func)
    body = ",".join(_describe(a) for a in args)
    if kwargs:
        body += ";" + ",".join(f"{k}={_describe(v)}" for k, v in sorted(kwargs.items()))
    if name in DATA_DEPENDENT:
        body += f";call {instance}"
    return f"{name}#{hashlib.blake2b(body.encode(), digest_size=6).hexdigest()}"


class Windows:
    """Which units of which stage steps ncu must see, and the profiler switch that shows them."""

    def __init__(
        self,
        plan: dict[tuple[str, int], set[int] | None],
        start: Callable[[], None] | None = None,
        stop: Callable[[], None] | None = None,
    ) -> None:
        if start is None or stop is None:
            import torch.cuda.profiler as cuda_profiler

            start, stop = cuda_profiler.start, cuda_profiler.stop
        self.plan, self._start, self._stop = plan, start, stop
        self.units: set[int] | None = set()
        self.open = False
        self.left = set(plan)  # the planned steps not yet ended
        self.current: tuple[str, int] | None = None

    def wanted(self, stage: str, step: int) -> bool:
        return (stage, step) in self.plan

    def whole(self, stage: str, step: int) -> bool:
        return (stage, step) in self.plan and self.plan[(stage, step)] is WHOLE

    @property
    def done(self) -> bool:
        """Whether every planned step has ended: nothing is left to profile."""
        return not self.left

    def begin_step(self, stage: str, step: int) -> None:
        self.current = (stage, step)
        self.units = self.plan.get((stage, step), set())
        self.switch(0)

    def switch(self, unit: int) -> None:
        """Open or close the window for the unit the step is entering."""
        want = self.units is WHOLE or unit in self.units
        if want and not self.open:
            self._start()
            self.open = True
        elif not want and self.open:
            self._stop()
            self.open = False

    def end_step(self) -> None:
        if self.open:
            self._stop()
            self.open = False
        self.units = set()
        if self.current is not None:
            self.left.discard(self.current)
        self.current = None


class OpProbe(TorchDispatchMode):
    """Numbers the operators of one step; marks, counts and windows them as configured.

    Made through :func:`op_probe`, which picks this class or its dynamo-guarded twin. Higher-order operators
    (flex attention run eagerly, as compiled code is under any dispatch mode) pass through it as one unit each:
    it runs them as they are, outside the mode, and counts them whole."""

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Recent torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # torch._dynamo: the pass took 5.27 s with it and 0.60 s without on the H200, in each of the run's two
        # probing launches. The guard keeps dynamo from compiling the mode's frames inside compiled code, which
        # cannot run in a process that never loaded dynamo; op_probe picks the guarded twin in one that did.
        return False

    def __init__(self, domain: str | None, tally: Tally | None, windows: Windows | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode is untyped
        self.tally, self.windows = tally, windows
        self.index = 0
        self._lock = threading.Lock()
        self._nvtx = None
        self._names: dict[str, object] = {}
        self._attrs: dict[Any, object] = {}  # by call_key
        self._calls = 0
        if domain is not None:
            import nvtx

            self._nvtx = nvtx.get_domain(ops_domain(domain))

    def __enter__(self) -> OpProbe:
        # Flex attention run eagerly wraps its operator in torch.compile(fullgraph=True), which no dispatch mode
        # lets compile ("found no compiled frames"): while the probe is on, it calls the operator itself (its
        # documented debug switch), as compiled code under a dispatch mode runs eagerly anyway.
        flex = sys.modules.get("torch.nn.attention.flex_attention")
        self._flex = (flex, getattr(flex, FLEX_EAGER, None)) if flex is not None else None
        if flex is not None:
            setattr(flex, FLEX_EAGER, True)
        super().__enter__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode is untyped
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        if self._flex is not None:
            setattr(self._flex[0], FLEX_EAGER, self._flex[1])

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        # A view launches no kernel, computes and moves nothing: not a unit, not marked, not counted.
        if getattr(func, "is_view", False):
            return func(*args, **kwargs)
        with self._lock:
            i = self.index
            self.index += 1
            if self.windows is not None:
                self.windows.switch(2 * i + 1)
        # Read before the call: an in-place operator changes its arguments (a resize_ their shapes).
        key = call_key(func, args, kwargs) if self._nvtx is not None or self.tally is not None else None
        mark = self._mark(func, args, kwargs, i, key)
        try:
            out = func(*args, **kwargs)
        finally:
            if mark is not None and self._nvtx is not None:
                self._nvtx.pop_range()
            if self.windows is not None:
                with self._lock:
                    self.windows.switch(2 * i + 2)
        if self.tally is not None:
            self.tally.add(func, args, kwargs, out, key)
        return out

    def _mark(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], i: int, key: Any) -> bool | None:
        if self._nvtx is None:
            return None
        self._calls += 1
        # One registered message per distinct call (by its key: describing the arguments again costs more than the
        # operator, in a launch-bound step); the payload (its index in the step) changes per call.
        # (With no profiler attached nvtx gives None attributes: presence is what is cached, not truth.)
        if key is not None and key in self._attrs:
            attrs = self._attrs[key]
        else:
            sig = signature(func, args, kwargs, self._calls)
            if sig not in self._names:
                self._names[sig] = self._nvtx.get_event_attributes(message=sig)
            attrs = self._names[sig]
            if key is not None:
                self._attrs[key] = attrs
        self._nvtx.push_range(attrs, payload=i)
        return True


class _GuardedOpProbe(OpProbe):
    """OpProbe with torch's dynamo guard (as any TorchDispatchMode has it), for processes that compile."""

    __torch_dispatch__ = OpProbe.__torch_dispatch__  # re-declared, so that __init_subclass__ guards it

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        base = getattr(TorchDispatchMode, "_should_skip_dynamo", None)
        return bool(base()) if base is not None else False


def op_probe(domain: str | None, tally: Tally | None, windows: Windows | None) -> OpProbe:
    """The probe for this process: guarded against dynamo where dynamo is loaded (compiled code may run),
    unguarded, and so without dynamo's import, where it is not (no compiled code can run)."""
    cls = _GuardedOpProbe if "torch._dynamo" in sys.modules else OpProbe
    return cls(domain, tally, windows)


@contextmanager
def graph_replays_counted(tally: Tally | None) -> Iterator[None]:
    """Record CUDA-graph replays in the tally: their operators bypass the dispatcher, so the stage's
    FLOPs cannot be counted and must say so rather than show the rest as the whole."""
    if tally is None:
        yield
        return
    import torch

    cls = getattr(torch.cuda, "CUDAGraph", None)
    if cls is None:
        yield
        return
    original = cls.replay

    def replay(self: Any, *a: Any, **k: Any) -> Any:
        tally.graph_replay()
        return original(self, *a, **k)

    cls.replay = replay
    try:
        yield
    finally:
        cls.replay = original
