"""Two launches of a command side by side, never on the GPU together: the timed run and the profile run's start.

A command workload's timeline job needs two launches of the program: a *timed* one with no profiler (its steps' wall
times, and the stages discovered from its ranges) and the *probe* one under nsys (which must know the stages). Run
one after the other they cost two interpreter and ``import torch`` start-ups (about 6 s on the GPU host, where the
whole of a small program takes 5 to 6 s). So the job starts both at once, and the hook gates the probe launch:

- the probe process, once the hook is installed (``torch`` imported, to follow ``torch.cuda.nvtx``) and before the
  program's first line, says it is *ready* (a file beside the gate) and waits until the gate opens: the job writes the
  gate file, holding the stages the timed run found, once the timed run has ended. The program has touched no GPU by
  then, and runs from there exactly as alone;
- the timed process, at the same point, waits until the probe launch is ready (or has ended): none of its program
  shares the machine with the other launch's start-up (the other launch sleeps while it runs), and no wait falls
  inside a clock the program keeps itself (a serving loop's, started before its first step).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from nsightflow.capture.launch.children import alive

POLL_S = 0.005


def ready_path(gate: str | Path) -> Path:
    """The file a gated launch writes when it waits at the gate."""
    return Path(f"{gate}.ready")


def wait_ready(gate: str | Path, pid: int) -> None:
    """Return once the gated launch (process ``pid``, the profiler that runs it) waits at ``gate``, or has ended."""
    ready = ready_path(gate)
    while not ready.exists() and alive(pid):
        time.sleep(POLL_S)


def wait_open(gate: str | Path) -> dict[str, Any]:
    """Say this launch is ready, wait until the job opens the gate, and return what it wrote there."""
    gate = Path(gate)
    if not gate.exists():
        ready_path(gate).touch()  # no content: several processes of a job may say so at once
        while not gate.exists():
            time.sleep(POLL_S)
    return dict(json.loads(gate.read_text()))


def open_gate(gate: str | Path, content: dict[str, Any]) -> None:
    """Let the gated launch go on, with ``content`` (written atomically: a reader never sees half of it)."""
    from nsightflow import files

    files.write_json(gate, content)
