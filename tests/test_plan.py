"""Capture plans from real H200 timelines: steps chosen per launch sequence, windows, and the rule's own entry point."""

import json

import pytest
from conftest import DATA

from nsightflow.capture import attribution, plan
from nsightflow.capture.plan import make_plan

D = DATA / "h200_tinyllm"


def test_resolve_steps():
    assert plan.resolve_steps(["first", "middle", "last"], 8) == [0, 3, 7]
    assert plan.resolve_steps(["every:3"], 8) == [0, 3, 6]
    assert plan.resolve_steps([5, "first"], 8) == [0, 5]
    with pytest.raises(ValueError, match="outside"):
        plan.resolve_steps([8], 8)
    with pytest.raises(ValueError, match="every:K"):
        plan.resolve_steps(["sometimes"], 8)


def test_a_timeline_without_a_probe_pass_is_profiled_in_whole_steps(tmp_path):
    # This older timeline has no probe pass: each chosen step is one window, every launch of it planned.
    got = make_plan(
        D / "timeline.sqlite",
        "nsightflow",
        ["first", "last"],
        "representatives",
        tmp_path / "plan.json",
        tmp_path / "plan.log",
    )
    assert [(w.stage, w.step, w.units) for w in got.windows] == [
        ("prefill", 0, None),
        ("decode", 0, None),
        ("decode", 7, None),
    ]
    assert "no probe pass" in got.windows[0].why
    assert got.stages["decode"] == {
        "steps": 8,
        "sampled_steps": [0, 7],
        "extra_steps": [],
        "structures": 1,
        "launches": 1088,
        "comm_launches": 0,
        "profiled": 272,
        "classes": 44,
    }
    assert len(got.expected) == 128 + 2 * 136
    assert plan.CapturePlan.read(tmp_path / "plan.json") == got
    log = (tmp_path / "plan.log").read_text()
    assert "decode: 1088 launches in 8 step(s) of 1 launch sequence(s); profiling 272" in log


def test_every_launch_mode_and_bad_modes():
    tl = attribution.read_timeline(D / "timeline.sqlite", "nsightflow")
    got = plan.plan_capture(tl, "nsightflow", [3], "every_launch")
    assert {(e["stage"], e["step"]) for e in got.expected} == {("prefill", 0), ("decode", 3)}
    assert json.loads(json.dumps(got.expected))[0]["unit"] == -1
    with pytest.raises(plan.PlanError, match="capture mode 'some'"):
        plan.plan_capture(tl, "nsightflow", [3], "some")
    with pytest.raises(plan.PlanError, match="no NVTX range of the harness's domain"):
        plan.plan_capture(attribution.read_timeline(D / "timeline.sqlite", "LLM"), "LLM", [3], "representatives")
