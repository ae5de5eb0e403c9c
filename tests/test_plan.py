"""Capture plans from real H200 timelines: steps chosen per launch sequence, windows, and the rule's own entry point."""

import json
from dataclasses import asdict

import pytest
from conftest import DATA

from nsightflow.capture.read import attribution, plan
from nsightflow.capture.read.plan import make_plan
from nsightflow.errors import RecordError

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
    (tmp_path / "plan.log").write_text("$ ncu --profile-from-start off python3 program.py\n")  # the job's log so far
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
    assert got.stages["decode"] == plan.StagePlan(
        steps=8,
        sampled_steps=[0, 7],
        extra_steps=[],
        structures=1,
        launches=1088,
        comm_launches=0,
        profiled=272,
        classes=44,
    )
    assert len(got.expected) == 128 + 2 * 136
    assert plan.CapturePlan.read(tmp_path / "plan.json") == got
    log = (tmp_path / "plan.log").read_text()
    assert log.startswith("$ ncu --profile-from-start off")  # a plan made while ncu starts keeps its command line
    assert "decode: 1088 launches in 8 step(s) of 1 launch sequence(s); profiling 272" in log


def test_every_launch_mode_and_bad_modes():
    tl = attribution.read_timeline(D / "timeline.sqlite", "nsightflow")
    got = plan.plan_capture(tl, "nsightflow", [3], "every_launch")
    assert {(e.stage, e.step) for e in got.expected} == {("prefill", 0), ("decode", 3)}
    assert got.expected[0].unit == -1 and isinstance(got.expected[0].unit, int)
    with pytest.raises(plan.PlanError, match="capture mode 'some'"):
        plan.plan_capture(tl, "nsightflow", [3], "some")
    with pytest.raises(plan.PlanError, match="no NVTX range of the harness's domain"):
        plan.plan_capture(attribution.read_timeline(D / "timeline.sqlite", "LLM"), "LLM", [3], "representatives")


def test_ncu_tests_launches_against_its_nccl_filter_only_where_the_stages_communicate(tmp_path):
    from nsightflow.capture.launch import ncu

    def argv(p: plan.CapturePlan) -> list[str]:
        settings = {"replay_mode": "kernel", "clock_control": "none", "cache_control": "all"}
        return ncu.capture_argv("ncu", "o", ["p"], comm_filter=p.communicates(), **settings)

    # The decoder on one H200: no NCCL kernel in its stages, so no kernel-name filter for ncu to test each launch on.
    alone = make_plan(
        D / "timeline.sqlite", "nsightflow", ["first"], "representatives", tmp_path / "a.json", tmp_path / "l"
    )
    assert not alone.communicates() and "--kernel-name" not in argv(alone)
    # Tensor-parallel decode on two H200s: NCCL's all-reduces in rank 0's stages, the filter keeps them out of windows.
    tp = plan.plan_capture(
        attribution.read_timeline(DATA / "h200x2_tp_ranks" / "timeline.sqlite", "nsightflow"),
        "nsightflow",
        ["first"],
        "representatives",
    )
    assert (tp.stages["decode"].comm_launches or 0) > 0 and tp.communicates()
    assert argv(tp)[argv(tp).index("--kernel-name") + 1] == "regex:^(?!nccl)"
    # A plan that does not say (written before it counted them): the filter stays.
    unsaid = plan.StagePlan(steps=1, sampled_steps=[0], extra_steps=[], structures=1, launches=3)
    assert plan.CapturePlan("representatives", "nsightflow", [], [], {"decode": unsaid}).communicates()


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda d: d["expected"][0].pop("class_key"), "planned launches lack ['class_key']"),
        (lambda d: d["expected"][0].update(colour="red"), "planned launch or stage is malformed"),
        (lambda d: next(iter(d["stages"].values())).pop("launches"), "planned launch or stage is malformed"),
        (lambda d: d.pop("windows"), "key 'windows' missing"),
    ],
)
def test_a_damaged_plan_is_refused_naming_its_file_and_the_fix(tmp_path, damage, says):
    # A real plan from the GPU host (the decoder on an H200), read back whole, then one part of it damaged.
    data = json.loads((DATA / "h200_v2" / "default" / "plan.json").read_text())
    whole = plan.CapturePlan.read(DATA / "h200_v2" / "default" / "plan.json")
    assert len(whole.expected) == len(data["expected"]) and set(whole.stages) == set(data["stages"])
    assert [asdict(e) for e in whole.expected] == data["expected"]
    damage(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match="plan.json") as err:
        plan.CapturePlan.read(path)
    assert says in str(err.value) and "rerun the plan rule" in str(err.value)


def test_each_launch_sequence_of_a_serving_loop_is_profiled_in_its_first_iteration():
    """Four iterations of transformers' continuous batching of a 1B Llama on an H200 (tests/data/h200_serving: the
    prefill of all prompts, the first decode at batch 64, and iterations 30 and 39, whose smaller batches made cuBLAS
    pick other GEMM kernels). Each launch sequence, found here by comparing the iterations' kernel names, has its
    first iteration profiled (the sampled first and last, and iteration 1 and 30 beside them), one launch of each of
    its classes; iteration 30's calls have other shapes than any earlier one's, so none of its classes is skipped."""
    tl = attribution.read_timeline(DATA / "h200_serving" / "timeline.sqlite", "nsightflow")
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    kernels = {int(n): tuple(g.sort_values("seq")["mangled"]) for n, g in ranged.groupby("step")}
    assert sorted(kernels) == [0, 1, 30, 39] and len(set(kernels.values())) == 4
    made = plan.plan_capture(tl, "nsightflow", ["first", "last"], "representatives")
    s = made.stages["iteration"]
    assert (s.sampled_steps, s.extra_steps, s.structures) == ([0, 39], [1, 30], 4)
    assert [w.step for w in made.windows] == [0, 1, 30, 39]
    thirty = ranged[ranged["step"] == 30]
    planned = [e.class_key for e in made.expected if e.step == 30]
    assert sorted(planned) == sorted(set(thirty["class_key"]))  # one launch of each class, each class once
