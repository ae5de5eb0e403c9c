"""The launches started with a command's timeline (ncu's, config ``ncu.start: with_timeline``) let go as soon as the
GPU is free of the timeline's programs, not once nsys has ended.

Why: after the program under nsys has run its last step and written its record, nsys still has its end to do (the
program's exit under it, its collection, the import and the SQLite export: 7.4 to 9.5 s of the serving loop's
timeline on the GPU host, docs/benchmarks.md), all on the CPU. ncu's launch, held at its first contact until then,
can do its CUDA initialisation, build its model and reach its first step meanwhile, where it waits for its plan
(nsightflow.capture.inside.hook_actions: the plan is made from the timeline's export).

When: every process of the program under nsys has written its hook record (the record is the last thing a process's
hook does: the probe's count and ceilings, its last GPU work, are written before it), as many as the timed run wrote.
A program that compiles is counted in a run of its own after nsys (nsightflow.capture.launch.command), on the GPU:
its gates open after that run, at the timeline's end, as they do where the records never reach the timed run's number.
ncu's launch let go may start processes (torchrun's ranks) while the run under nsys is still waited for: that run's
sweep of what it left behind spares them (nsightflow.capture.launch.children.kill_descendants).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from nsightflow.capture.inside.gate import POLL_S, open_gate
from nsightflow.capture.inside.hook_settings import records_of
from nsightflow.capture.launch.tools import note


class Release:
    """Opens ``gates`` (gate -> the launch's pid) with one content, once: when :meth:`watch`'s run has written as
    many records as it is told, or at :meth:`at_end`, whichever comes first. Says in ``log`` how long before the
    timeline's end it opened them."""

    def __init__(self, gates: dict[str, int], log: str | Path) -> None:
        self.gates = list(gates)
        self.log = log
        self.lock = threading.Lock()
        self.content: dict[str, Any] | None = None
        self.opened: float | None = None  # time.monotonic() when the gates opened
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def watch(self, content: dict[str, Any], out: str | Path, expected: int, early: bool) -> None:
        """The gates' content from now on; where ``early``, open them once ``expected`` records of the run whose
        hook settings name ``out`` exist (polled on a thread of this job)."""
        self.content = content
        if not (early and self.gates and expected > 0):
            return

        def poll() -> None:
            while not self.stopped.wait(POLL_S * 10):
                if len(records_of(out)) >= expected:
                    self._open()
                    return

        self.thread = threading.Thread(target=poll, name="nsightflow-release", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """The run watched has ended: stop watching (the gates stay as they are)."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def at_end(self, ended: float) -> None:
        """The timeline's end (``ended``: time.monotonic() when its last program ended): open the gates if still
        closed, and say when they opened."""
        self.stop()
        if not self.gates:
            return
        if self.opened is None:
            self._open()
            note(self.log, "the launches started with the timeline were let go at its end")
        else:
            note(self.log, f"the launches started with the timeline were let go {ended - self.opened:.2f} s before "
                 "its end (every process of its program had written its record)")  # fmt: skip

    def _open(self) -> None:
        with self.lock:
            if self.opened is not None:
                return
            assert self.content is not None, "the gates' content is set before they open"
            for gate in self.gates:
                open_gate(gate, self.content)
            self.opened = time.monotonic()
