"""Progress of a capture: counted from the output as it streams, placed in the plan (stage, step)."""

import io
import sys

from conftest import DATA

from nsightflow.capture.inside.progress import LaunchProgress
from nsightflow.capture.launch import children
from nsightflow.capture.read.plan import CapturePlan


def test_progress_follows_the_plan_while_the_child_runs():
    plan = CapturePlan.read(DATA / "h200_v2" / "default" / "plan.json")
    n = len(plan.expected)
    out = io.StringIO()
    progress = LaunchProgress("ncu tinyllm", [(e.stage, e.step) for e in plan.expected], every_s=0.0, stream=out)
    # A child printing one ncu-style result line per planned launch, with other output between.
    script = (
        f"for i in range({n}): print('==PROF== Profiling \"k\" - ' + str(i) + ': 0%...100% - 6 passes'); print('x')"
    )
    text, code = children.run([sys.executable, "-c", script], on_line=progress)
    assert code == 0 and text.count("==PROF== Profiling") == n and text.count("x\n") == n
    lines = out.getvalue().splitlines()
    assert len(lines) == n and lines[0].startswith(f"nsightflow: ncu tinyllm: 1/{n} planned launches profiled")
    last = plan.expected[-1]
    assert f"{n}/{n} planned launches profiled, now stage {last.stage} step {last.step}" in lines[-1]


def test_a_timeout_still_returns_what_was_printed():
    import subprocess

    import pytest

    script = "import time; print('==PROF== Profiling \"k\"', flush=True); time.sleep(30)"
    seen = []
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        children.run([sys.executable, "-c", script], timeout_s=2, on_line=seen.append)
    assert seen == ['==PROF== Profiling "k"\n'] and "==PROF==" in exc.value.output
