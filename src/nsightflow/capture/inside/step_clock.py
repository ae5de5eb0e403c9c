"""When a range of the program ended: waited for in the profiled runs, read from the GPU's own clock in the timed run.

The runs under a profiler synchronize the GPU at a step's end, so that the step's window holds its kernels. The timed
run, whose walls are the program's own, must not: a loop that queues its next step while the GPU still runs the last
one (gpt-fast's decode steps, any program that never waits for its tokens) runs at the GPU's pace, and a wait at
each step's end adds the host's launch time to every step (a steady gpt-fast decode step took 0.43 ms so, where
its GPU work took 0.19 ms). There a range's wall is read from two CUDA events recorded on the current stream at its
start and its end: the time the GPU took from reaching the range's work to finishing it. Where the GPU waits for the
host, the first event runs as soon as it is recorded and the span is the host's; where the host runs ahead, it is the
GPU's; neither waits. Where the GPU has no work left when the range ends (a program that synchronized its step
itself, or whose host is slower than its GPU), the step ended when its range did: its host span is its wall (the
hook's own work at the range's end is then never part of it; the events' span held about 50 µs of it, +21% on a
0.26-ms step). A range with no event (no GPU, a stream being captured into a CUDA graph, two devices) keeps its host
span. Each clocked range's start is also kept on that clock (from the first event the process recorded), so that a
step's pace, from its start to the next step's, holds what the program does between its ranges too. Only a sample of
the steps is clocked so (:class:`Sampler`): the others' host times are put on the GPU's clock by the clocked steps
around them (nsightflow.capture.launch.discovery.step_clocks). What ``torch.compile`` made while a range was open is
read at its push and pop too (:func:`compiled_graphs`).
"""

from __future__ import annotations

import os
import sys
import time
import weakref
from collections import deque
from typing import Any

_CUDA: Any = None  # torch, once the program has initialised CUDA: it stays so (a forked child asks again)
_STREAMS: dict[tuple[int, int, int], Any] = {}  # the current stream's objects, by torch's (id, device, type)


def _forked() -> None:
    """In a forked child: CUDA is not initialised there, and the parent's streams and events are not its own. They
    are left behind, never destroyed: an event's destructor calls CUDA, which fails in a child forked after CUDA's
    initialisation, and torch then aborts the child (a ``subprocess`` with a ``preexec_fn``, a DataLoader's forked
    workers). New, empty caches and pending lists take their place."""
    global _CUDA, _STREAMS, _FREE
    _CUDA = None
    inherited = [_STREAMS, _FREE] + [(s.pending, s.origin) for s in _SPANS]
    if _STREAMS or _FREE or any(s.pending for s in _SPANS):
        leak(inherited)
    _STREAMS, _FREE = {}, {}
    for spans in _SPANS:
        spans.pending, spans.origin = deque(), None


def leak(inherited: Any) -> None:
    """A reference to ``inherited`` that no one holds: never freed (a forked child's copies of its parent's CUDA
    objects, see :func:`_forked`)."""
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(inherited))


os.register_at_fork(after_in_child=_forked)


def _cuda() -> Any:
    """torch, where the program has initialised CUDA (the hook never initialises it), else None. Asked at every
    clocked range's start and end: once CUDA is initialised the answer is kept (until a fork, in the child)."""
    global _CUDA
    if _CUDA is not None:
        return _CUDA
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    _CUDA = torch
    _bind(torch)
    return torch


class _Calls:
    """torch's bindings under the public calls the clock makes at every range's start and end (each public call is a
    Python frame around one of these); the public calls where a torch lacks them."""

    capturing: Any = None
    stream: Any = None
    device: Any = None
    query_stream: Any = None
    record: Any = None
    query: Any = None
    elapsed: Any = None


def _bind(torch: Any) -> None:
    c = torch._C
    try:
        _Calls.capturing, _Calls.stream = c._cuda_isCurrentStreamCapturing, c._cuda_getCurrentStream
        _Calls.query_stream, _Calls.device = c._CudaStreamBase.query, c._cuda_getDevice
        _Calls.record, _Calls.query = c._CudaEventBase.record, c._CudaEventBase.query
        _Calls.elapsed = c._CudaEventBase.elapsed_time
    except AttributeError:  # a torch without these bindings: its public calls
        _Calls.capturing, _Calls.stream = torch.cuda.is_current_stream_capturing, None
        _Calls.query_stream, _Calls.record = torch.cuda.Stream.query, torch.cuda.Event.record
        _Calls.query, _Calls.elapsed = torch.cuda.Event.query, torch.cuda.Event.elapsed_time


def _current_stream(torch: Any) -> Any:
    """The current CUDA stream, as ``torch.cuda.current_stream()`` gives it, without making a new object each time
    (that took several microseconds, at each range's start and end)."""
    if _Calls.stream is None:
        return torch.cuda.current_stream()
    key = _Calls.stream(_Calls.device())
    stream = _STREAMS.get(key)
    if stream is None:
        stream = _STREAMS[key] = torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2])
    return stream


def idle() -> bool:
    """Whether the GPU's current stream has no work left (a program that synchronized its step itself): the step
    ended when its range did, and the hook's own synchronization is not part of its wall."""
    torch = _cuda()
    return torch is None or bool(_Calls.query_stream(_current_stream(torch)))


def closing() -> int:
    """Synchronize the GPU at a range's end; when the range ended (ns): at once where the program had waited for its
    work itself, else once the synchronization returned (the hook's own wait is never part of a step's wall)."""
    ended, done = time.perf_counter_ns(), idle()
    torch = _cuda()
    if torch is not None:
        torch.cuda.synchronize()  # the whole device: a side stream's kernels end inside the step too
    return ended if done else time.perf_counter_ns()


# Which candidate steps the timed run clocks on the GPU: each name's first FIRST ranges (where one-time work,
# compilation and cold caches, is), then one in EVERY. A clocked step cost a host-bound step 71 to 95 µs more than
# an unclocked one (its two events, their queries and span reads, the look: +21% to +29% of gpt-fast's compiled
# 0.33-0.40 ms decode step with every step clocked, docs/benchmarks.md), so one in 8 cost 2.5-3.5% of each step; one
# in 32 measured -1.2% to +5.1% of the program's own step in six runs on two machines, where the same process's arm
# with no step clocked read -2.9% to +4.0% (the arms' spread, not the clock's cost). The steps between two clocked
# ones keep their host spans, put on the GPU's clock by the two (nsightflow.capture.launch.discovery.step_clocks).
# EVERY 1: every step clocked.
FIRST, EVERY = 8, 32
NEVER = 1 << 62  # EVERY 0: no look after the FIRST


class Sampler:
    """Which ranges the timed run looks at, by name: its first FIRST ranges, then one in EVERY; a range looked at is
    clocked where it is a candidate (top level in its domain, or a configured stage). ``looks[name]``: how many of the
    name's ranges remain until its next look (none: the next one); the timed hook's push counts it down itself
    (nsightflow.capture.inside.hook_timed), with no call, and calls :meth:`take` at a look. EVERY is read at a look: a
    change applies from each name's next look (``looks.clear()``: from its next range)."""

    def __init__(self) -> None:
        self.looks: dict[Any, int] = {}
        self.seen: dict[Any, int] = {}  # looks so far, by name

    def take(self, name: Any, candidate: bool = True) -> bool:
        """Whether this range of ``name`` is clocked."""
        left = self.looks.get(name, 1) - 1
        if left > 0:
            self.looks[name] = left
            return False
        seen = self.seen.get(name, 0) + 1
        self.seen[name] = seen
        self.looks[name] = 1 if seen < FIRST else EVERY if EVERY > 0 else NEVER
        return candidate


_FREE: dict[int, list[Any]] = {}  # device -> events whose times have been read, recorded again by the next marks
_SPANS: weakref.WeakSet[GpuSpans] = weakref.WeakSet()  # every GpuSpans, whose pending events a forked child leaves


def mark() -> Any:
    """A timing event recorded on the current stream now, or None where there is none to record (no CUDA yet, or
    the stream is being captured into a CUDA graph, where a recorded event would become a node of the graph). Events
    are reused once read (GpuSpans.settle): making one costs several times recording one, and a step of a host-bound
    loop (a CUDA-graph replay: a quarter of a millisecond) has every microsecond of the hook's in its pace."""
    torch = _cuda()
    if torch is None or _Calls.capturing():
        return None
    return _record(torch, _current_stream(torch))


def end_mark() -> Any:
    """At the end of a range that has its start's event: a timing event recorded on the current stream now, or None
    where the stream has no work left (the step ended when its range did: its host span is its wall). One look-up of
    the stream serves the idle check and the event (a range open at a graph capture's start had no start event)."""
    torch = _cuda()
    if torch is None:
        return None
    stream = _current_stream(torch)
    return None if _Calls.query_stream(stream) else _record(torch, stream)


def release(event: Any) -> None:
    """An event whose time is no longer needed (read, or recorded at a range's end that was not a clocked one's),
    recorded again by a later mark (None: nothing)."""
    if event is not None:
        _FREE.setdefault(event.device.index, []).append(event)


def _record(torch: Any, stream: Any) -> Any:
    free = _FREE.get(stream.device_index)  # an event records on the device it was first recorded on
    event = free.pop() if free else torch.cuda.Event(enable_timing=True)
    _Calls.record(event, stream)
    return event


# Ranges pending before their spans are read as the program goes (each read, a query and two spans), their events then
# reused: one step in SETTLE bears the reads, where events made anew would cost every step. Not yet compared on one
# machine: 8,192 measured +14.65% of gpt-fast's compiled step on a shared H200 host, 64 +3.31% and +4.00% on others
# (docs/benchmarks.md).
SETTLE = 64


class GpuSpans:
    """Ranges' spans on the GPU's clock, and their starts from the first event recorded (``origin``), kept by key
    until both events have run; read without waiting as the program goes (so that a long run keeps few events), and
    once more, waiting, when the record is written."""

    def __init__(self) -> None:
        self.pending: deque[tuple[int, Any, Any]] = deque()
        self.spans: dict[int, tuple[int, int]] = {}  # key -> (span, start from the origin), ns
        self.origin: Any = None
        _SPANS.add(self)

    def add(self, key: int, start: Any, end: Any) -> None:
        """A range's events at its start and end; ``end`` None: its start only (its host span stands, span 0)."""
        if start is not None:
            self.origin = start if self.origin is None else self.origin
            self.pending.append((key, start, end))
            if len(self.pending) >= SETTLE:
                self.settle(wait=False)

    def settle(self, wait: bool) -> dict[int, tuple[int, int]]:
        """(span, start) of the ranges whose events have run (every one with ``wait``: the GPU synchronized first),
        by key. A CUDA error (a program that ended with its context broken) leaves the rest to their host spans: the
        record is written."""
        try:
            if wait and self.pending and (torch := _cuda()) is not None:
                torch.cuda.synchronize()
            query, elapsed = _Calls.query, _Calls.elapsed
            while self.pending and (wait or query(_last(self.pending[0]))):
                key, start, end = self.pending.popleft()
                try:
                    at = elapsed(self.origin, start) if start is not self.origin else 0.0
                    span = elapsed(start, end) if end is not None else 0.0
                    self.spans[key] = (round(span * 1e6), round(at * 1e6))
                except RuntimeError:  # recorded on two devices: the host span stands, the events are not reused
                    continue
                for e in (start, end):
                    if e is not self.origin:
                        release(e)
        except RuntimeError:
            self.pending.clear()
        return self.spans


def _last(pending: tuple[int, Any, Any]) -> Any:
    """A pending range's last event: its end's, or its start's where it has no end event."""
    return pending[2] if pending[2] is not None else pending[1]


_COUNTERS: Any = None


def compiled_graphs() -> int:
    """How many graphs ``torch.compile`` has made in this process so far (dynamo's own counter; 0 before dynamo is
    loaded): read at every range's push and pop, so a dictionary look-up once dynamo is there."""
    global _COUNTERS
    if _COUNTERS is None:
        if "torch._dynamo" not in sys.modules:
            return 0
        try:
            from torch._dynamo.utils import counters

            _COUNTERS = counters
        except Exception:  # a torch without that counter: no compilation is seen, none is invented
            return 0
    return int(_COUNTERS["stats"]["unique_graphs"])
