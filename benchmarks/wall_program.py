"""Shared by the wall-time scripts: the wall-time test's program (tests/test_gpu.py, a launch-bound decode of 16
layers, batch 1) and its launch alone or under nsys, the harness's timed pass as the timeline job runs it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from nsightflow.capture.launch import nsys

ARGS = {"batch": 1, "prompt": 128, "decode_steps": 16, "n_layers": 16}


def launch_argv(tmp: str | Path, i: int, profiled: bool, wrap: list[str] | None = None) -> tuple[list[str], Path]:
    """The ``i``-th launch's argv (the program after ``wrap``, e.g. ``taskset``; under nsys when ``profiled``) and the
    path of the harness's record, both under ``tmp``."""
    out = Path(tmp) / f"r{i}.json"
    argv = [*(wrap or []), sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(ARGS)]
    argv += ["--out", str(out), "--timed"]
    if profiled:
        argv = nsys.profile_argv(shutil.which("nsys"), Path(tmp) / f"t{i}", argv, capture_range="none")
    return argv, out
