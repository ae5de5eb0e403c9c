"""The hook in a command's timed run (nsightflow.capture.inside.hook, mode ``timed``): the program's ranges logged as
they come and rebuilt into the record's ranges afterwards.

The timed run is the program's own pace, so every microsecond a push and a pop take is in a host-bound step (gpt-fast
``--compile``'s decode step, a CUDA-graph replay: 0.25 to 0.45 ms). A hook that kept each thread's stack, its depths
and what ``torch.compile`` had made as each range came took 3.4 µs a pair in a loop of its own on a slow H200 host and
15 to 30 µs in that step, where the program's own work leaves the hook's code and data out of the CPU's caches
(docs/benchmarks.md, 2026-12-02). So a push appends one tuple (time, thread, domain, name, graphs made so far, no
event) and counts its name down to its next look (step_clock.Sampler), a pop appends another (time, thread, domain,
graphs, no event); nothing else. Where a name's look is due, or the program opens its first range, the push takes the
lock and rebuilds the ranges logged so far (:meth:`TimedTracker.rows`): this thread's stack tells whether the range is
a candidate step (top level in its domain, or a configured stage), which is then clocked on the GPU
(step_clock.mark: the event rides in its push's tuple); while a clocked range is open, pops take the lock too and end
it on the GPU's clock (step_clock.end_mark). The timed run does nothing at stage steps (its stages are found from its
ranges: nsightflow.capture.launch.discovery), so nothing else needs the stack as the program runs.

What ``torch.compile`` made while a range was open is dynamo's graph counter at its pop less at its push (read from
the counters' dictionary once ``torch._dynamo.utils`` is imported: nsightflow.capture.inside.after_import).
"""

from __future__ import annotations

import os
import weakref
from threading import get_ident
from time import perf_counter_ns
from types import ModuleType
from typing import Any

from nsightflow.capture.inside import step_clock
from nsightflow.capture.inside.after_import import patch_on_import
from nsightflow.capture.inside.hook import Tracker
from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.domains import AUTO_DOMAIN

# A push: (ns, thread, domain, name, graphs, its start's event or None); a pop: (ns, thread, domain, graphs, its end's
# event or None). Told apart by their length.
PUSH = 6


class TimedTracker(Tracker):
    """The timed run's tracker: every range of every domain logged (see the module's doc)."""

    def __init__(self, settings: HookSettings) -> None:
        super().__init__(settings)
        self.events: list[tuple[Any, ...]] = []
        self.clocked = step_clock.Sampler()  # which ranges are looked at, and clocked on the GPU
        self.looks = self.clocked.looks  # its countdowns, counted by the push itself
        self.gpu = step_clock.GpuSpans()  # the clocked ranges' spans on the GPU's clock, by index in rows
        self.open_clocked = 0  # clocked ranges whose pop is to come (their pops take the slow way)
        self.counters: Any = None  # dynamo's counters, once imported
        self.open: dict[int, list[tuple[Any, ...]]] = {}  # thread -> its open ranges' push events, as rebuilt
        # domain, name, depth, thread, start, end, graphs torch.compile made while the range was open
        self.ranges: list[tuple[str, str, int, int, int, int, int]] = []
        patch_on_import({"torch._dynamo.utils": self._counted})
        _TRACKERS.add(self)

    def _counted(self, module: ModuleType) -> None:
        self.counters = module.counters

    def push(self, domain: str | None, name: str | None, payload: Any = None) -> None:
        if self.inside:
            return
        if self.gated:  # a late gate not yet passed: a range is a contact (its clock starts after the wait)
            self.pass_gate("a range")
        left = self.looks.get(name, 1) - 1  # step_clock.Sampler.take's count down, without its call
        if left > 0 and (self.own or domain == AUTO_DOMAIN):
            self.looks[name] = left
            c = self.counters
            graphs = c["stats"]["unique_graphs"] if c else 0
            self.events.append((perf_counter_ns(), get_ident(), domain, name, graphs, None))
            return
        self._look(domain, name)

    def pop(self, domain: str | None) -> None:
        if self.inside:
            return
        now = perf_counter_ns()
        c = self.counters
        graphs = c["stats"]["unique_graphs"] if c else 0
        if self.open_clocked:
            self._close(domain, now, graphs)
            return
        self.events.append((now, get_ident(), domain, graphs, None))

    def _look(self, domain: str | None, name: str | None) -> None:
        """A push whose name is due a look, or while the program has opened no range of its own: a candidate step
        looked at is clocked on the GPU."""
        d = domain or ""
        if not self.own:
            self.first_own(d)
        with self.lock:
            stack = self._stack(get_ident())
            top = not any((e[2] or "") == d for e in stack)
            if not self.clocked.take(name, top or (name or "") in (self.s.stages or ())):
                event = None
            else:
                self.look_for_rank()
                event = step_clock.mark()
                self.open_clocked += event is not None
            c = self.counters
            graphs = c["stats"]["unique_graphs"] if c else 0
            # the range starts once the clock's work is done: none of it is the program's time
            self.events.append((perf_counter_ns(), get_ident(), domain, name, graphs, event))

    def _close(self, domain: str | None, now: int, graphs: int) -> None:
        """A pop while a clocked range is open: where it ends that range, its end on the GPU's clock. The end's event
        is recorded first, before the log is rebuilt (the hook's work is never in a clocked range's span), and given
        back where this pop ends another range."""
        end = step_clock.end_mark()  # None where the GPU has no work left: its host span stands
        with self.lock:
            stack = self._stack(get_ident())
            d = domain or ""
            at = next((i for i in range(len(stack) - 1, -1, -1) if (stack[i][2] or "") == d), None)
            if at is not None and stack[at][5] is not None:
                self.open_clocked -= 1
            else:
                step_clock.release(end)
                end = None
            self.events.append((now, get_ident(), domain, graphs, end))

    def _stack(self, tid: int) -> list[tuple[Any, ...]]:
        """Thread ``tid``'s open ranges (their push events), the log rebuilt up to now (under the lock)."""
        self._rebuild()
        return self.open.get(tid, [])

    def _rebuild(self) -> None:
        """The events logged since the last rebuild, in order, into each thread's open ranges and the closed ranges'
        rows (a pop ends its thread's innermost open range of its domain; one that ends none is dropped); a clocked
        range's events handed to the GPU's spans under its row's index."""
        events, n = self.events, len(self.events)
        rows, opened = self.ranges, self.open
        for i in range(n):
            e = events[i]
            stack = opened.get(e[1])
            if stack is None:
                stack = opened[e[1]] = []
            if len(e) == PUSH:
                stack.append(e)
                continue
            d = e[2] or ""
            at = next((j for j in range(len(stack) - 1, -1, -1) if (stack[j][2] or "") == d), None)
            if at is None:
                continue
            p = stack.pop(at)
            depth = sum(1 for x in stack[:at] if (x[2] or "") == d)
            rows.append((d, p[3] or "", depth, e[1], p[0], e[0], e[3] - p[4]))
            if p[5] is not None:
                self.gpu.add(len(rows) - 1, p[5], e[4])
        del events[:n]  # rebuilt: the open ranges' pushes are in their stacks (other threads append, never index)

    def rows(self) -> list[tuple[str, str, int, int, int, int, int]]:
        """The ranges closed so far (domain, name, depth, thread, start, end, graphs), in the order they closed."""
        with self.lock:
            self._rebuild()
            return self.ranges

    def ranges_record(self) -> list[list[Any]]:
        """Each closed range with its wall and start (ns) on the GPU's clock where it was clocked (else 0 and -1)."""
        rows = self.rows()
        spans = self.gpu.settle(wait=True)
        return [[*r, *spans.get(i, (0, -1))] for i, r in enumerate(rows)]


_TRACKERS: weakref.WeakSet[TimedTracker] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child (a DataLoader's worker, a ``subprocess`` with a ``preexec_fn``): the parent's CUDA events in
    the log and in the open ranges are not the child's, and are left behind, never destroyed (their destructors call
    CUDA, which aborts such a child: step_clock._forked); the ranges keep their host times, none is open on the GPU."""
    for t in _TRACKERS:
        stacks = list(t.open.values())
        kept = [e[-1] for e in t.events + [e for stack in stacks for e in stack] if e[-1] is not None]
        if kept:
            step_clock.leak(kept)
        t.events = [e[:-1] + (None,) for e in t.events]
        t.open = {tid: [e[:-1] + (None,) for e in stack] for tid, stack in t.open.items()}
        t.open_clocked = 0


os.register_at_fork(after_in_child=_forked)
