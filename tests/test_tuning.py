"""A compiled program's autotuning is decided once, by its run without a profiler
(nsightflow.capture.inside.hook_tuning).

Inductor's real autotuners (``CoordescTuner.autotune``, ``CachingAutotuner.benchmark_all_configs``) run on the CPU
in tests/programs/autotuners.py, each candidate timed by a rule its command line sets: the timed run's rule, and
another rule for the profiled run (a profiler slows every candidate, so its timing ranks them otherwise). The
expected picks are the program's own when it runs plainly under each rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.launch.command_call import CommandCall

PROGRAM = Path(__file__).parent / "programs" / "autotuners.py"
pytest.importorskip("triton", reason="inductor's autotuners build triton.Config objects")


def _run(best: int, tmp_path: Path, settings: HookSettings | None = None) -> dict:
    """The program's picks when candidates are timed as distances from block ``best``: plainly, or with the hook."""
    env = dict(os.environ)
    env.pop("NSIGHTFLOW_HOOK", None)
    argv = [sys.executable, str(PROGRAM), str(best)]
    if settings is not None:
        launch = CommandCall(command=argv).launch(settings, tmp_path)
        argv, env = launch.argv, {**env, **launch.env}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_profiled_run_takes_the_autotuning_choices_of_the_run_without_a_profiler(tmp_path):
    plain_fast, plain_slowed = _run(512, tmp_path), _run(64, tmp_path)
    # the two timings pick different kernels when the program runs plainly
    assert plain_fast["coordesc"] == [512, 8] and plain_fast["configs"] == 256
    assert plain_slowed["coordesc"] == [64, 8] and plain_slowed["configs"] == 64

    timed = _run(512, tmp_path, HookSettings("timed", str(tmp_path / "timed.json")))
    assert timed == plain_fast  # recording changes nothing
    (record,) = [json.loads(p.read_text()) for p in tmp_path.glob("timed.*.json")]
    choices = record["autotuning"]
    assert len(choices) == 2 and all(len(picks) == 1 for picks in choices.values())

    profiled = _run(64, tmp_path, HookSettings("ranged", None, tuning=choices))
    assert profiled["coordesc"] == plain_fast["coordesc"] and profiled["configs"] == plain_fast["configs"]
    assert profiled["timed"] == 0  # no candidate launched: the choices were taken, not timed

    other = {json.dumps(["coordesc", "another_kernel", "None", []]): list(choices.values())[0]}
    untouched = _run(64, tmp_path, HookSettings("ranged", None, tuning=other))
    assert untouched == plain_slowed  # a kernel the record does not name is tuned as usual
