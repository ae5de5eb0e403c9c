"""Progress of a long capture in the terminal: launches profiled of those planned, and where in the run; the
harness's phases, timed.

ncu prints ``==PROF== Profiling "kernel" ...`` as it starts each result; the plan lists the launches in
the order ncu meets them, so the Nth such line is the plan's Nth launch (stage and step known).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

PROFILING = "==PROF== Profiling"  # how ncu's line about each result it starts begins


@contextmanager
def phase(name: str, stream: TextIO | None = None) -> Iterator[None]:
    """Time one phase of the harness (build, warm-up, a pass, the ceilings) and print it to stderr, so a job's log
    says where a launch's time went (under a profiler, a pass slows by its launches; the export comes after)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - start
        print(f"nsightflow: {name}: {took:.2f} s", file=stream or sys.stderr, flush=True)


class LaunchProgress:
    """Callable on each output line of an ncu run; prints at most every ``every_s`` seconds and at the end.
    ``expected``: the (stage, step) of each planned launch, in the plan's order."""

    def __init__(self, label: str, expected: list[tuple[str, int]], every_s: float = 10.0, stream: TextIO = sys.stderr):
        self.label, self.expected, self.every_s, self.stream = label, expected, every_s, stream
        self.done = 0
        self.started = self.last = time.monotonic()

    def line(self) -> str:
        total = len(self.expected)
        where = ""
        if 0 < self.done <= total:
            stage, step = self.expected[self.done - 1]
            where = f", now stage {stage} step {step}"
        return (
            f"nsightflow: {self.label}: {self.done}/{total} planned launches profiled{where} "
            f"({time.monotonic() - self.started:.0f} s)"
        )

    def __call__(self, text: str) -> None:
        found = text.count(PROFILING)  # anywhere in the line (see nsightflow.capture.launch.ncu.profiled_count)
        if not found:
            return
        self.done += found
        now = time.monotonic()
        if now - self.last >= self.every_s or self.done == len(self.expected):
            self.last = now
            print(self.line(), file=self.stream, flush=True)
