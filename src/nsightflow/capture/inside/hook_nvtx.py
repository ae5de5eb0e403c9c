"""The program's NVTX calls followed by the hook (nsightflow.capture.inside.hook): the nvtx package's ``push_range``,
``pop_range`` and ``annotate`` (as a context manager and a decorator) and ``torch.cuda.nvtx``'s ``range_push`` and
``range_pop``, each replaced by one that makes the program's call and tells the hook's tracker, in every module that
exposes them (both are imported lazily by the program)."""

from __future__ import annotations

from typing import Any, Protocol


class Tracker(Protocol):
    """What the wrappers tell (nsightflow.capture.inside.hook.Tracker): a range pushed and popped."""

    def push(self, domain: str | None, name: str | None, payload: Any = None) -> None: ...

    def pop(self, domain: str | None) -> None: ...


def wrap(tracker: Tracker) -> None:
    """Follow the nvtx package's and torch.cuda.nvtx's push/pop ranges (both imported lazily by the program)."""
    try:
        import nvtx
        import nvtx.nvtx as impl
    except ImportError:
        nvtx = None
    if nvtx is not None:
        base = impl.annotate

        class annotate(base):  # type: ignore[misc,valid-type]
            def __init__(self, message: Any = None, color: Any = None, domain: Any = None, *a: Any, **k: Any):
                super().__init__(message, color, domain, *a, **k)
                self._nf = (domain, message, k.get("payload", a[1] if len(a) > 1 else None))

            def __enter__(self) -> Any:
                out = super().__enter__()
                tracker.push(*self._nf)
                return out

            def __exit__(self, *exc: Any) -> Any:
                tracker.pop(self._nf[0])
                return super().__exit__(*exc)

            def __call__(self, func: Any) -> Any:
                import functools

                if self._nf[1] is None:
                    self._nf = (self._nf[0], func.__name__, self._nf[2])

                @functools.wraps(func)
                def inner(*args: Any, **kwargs: Any) -> Any:
                    with self:
                        return func(*args, **kwargs)

                return inner

        push0, pop0 = impl.push_range, impl.pop_range

        def push_range(message: Any = None, color: Any = None, domain: Any = None, *a: Any, **k: Any) -> Any:
            out = push0(message, color, domain, *a, **k)
            tracker.push(domain, message, k.get("payload", a[1] if len(a) > 1 else None))
            return out

        def pop_range(domain: Any = None) -> Any:
            tracker.pop(domain)
            return pop0(domain)

        for mod in (nvtx, impl):
            mod.annotate, mod.push_range, mod.pop_range = annotate, push_range, pop_range
    _wrap_torch_nvtx(tracker)


def _wrap_torch_nvtx(tracker: Tracker) -> None:
    """torch.cuda.nvtx's ranges (the default domain); on a machine without CUDA they only follow, never raise."""
    try:
        import torch.cuda.nvtx as tn
    except ImportError:
        return
    push0, pop0 = tn.range_push, tn.range_pop

    def quiet(fn: Any, *a: Any) -> Any:
        try:
            return fn(*a)
        except (RuntimeError, AttributeError):  # a CPU-only build's NVTX stub: the range is followed all the same
            return 0

    def range_push(msg: str) -> Any:
        out = quiet(push0, msg)
        tracker.push("", msg)
        return out

    def range_pop() -> Any:
        tracker.pop("")
        return quiet(pop0)

    tn.range_push, tn.range_pop = range_push, range_pop
