"""The timed hook's push and pop of one range, alone, in microseconds a pair: nsightflow's hook installed in timed mode
(nsightflow.capture.inside.hook_timed; no step clocked on the GPU, as most of a run's steps are),
``push("LLM", "decode")`` and ``pop("LLM")`` called 50,000 times, twice in one process; beside it the floor of any
hook written in Python (one tuple of the time and the thread appended at the push and at the pop, nothing else).
Compare two trees by running it with each one's ``src`` first on ``PYTHONPATH``, in turns:
``PYTHONPATH=<tree>/src python3 benchmarks/hook_push_pop.py``."""

from __future__ import annotations

import time
from collections.abc import Callable
from threading import get_ident
from time import perf_counter_ns

from nsightflow.capture.inside import step_clock

try:
    from nsightflow.capture.inside.hook_install import install
except ImportError:  # a tree before 2026-12-02
    from nsightflow.capture.inside.hook import install  # type: ignore[attr-defined,no-redef]
from nsightflow.capture.inside.hook_settings import HookSettings

PAIRS = 50_000


def per_pair_us(body: Callable[[], None]) -> float:
    began = time.perf_counter()
    for _ in range(PAIRS):
        body()
    return (time.perf_counter() - began) / PAIRS * 1e6


def main() -> None:
    tracker = install(HookSettings("timed", ""))
    assert tracker is not None
    if tracker.auto is not None:  # the program's own ranges are followed: no automatic stages
        tracker.auto.remove()
        tracker.auto = None
    step_clock.EVERY = 0  # none after the first FIRST of the name

    def hooked() -> None:
        tracker.push("LLM", "decode")
        tracker.pop("LLM")

    log: list[tuple[int, int, str, str | None]] = []

    def floor() -> None:
        log.append((perf_counter_ns(), get_ident(), "LLM", "decode"))
        log.append((perf_counter_ns(), get_ident(), "LLM", None))

    for _ in range(step_clock.FIRST + 10):
        hooked()
    got = [round(per_pair_us(hooked), 2) for _ in range(2)]
    print(f"µs a push and pop: the hook {got}, the floor {[round(per_pair_us(floor), 2) for _ in range(2)]}")


if __name__ == "__main__":
    main()
