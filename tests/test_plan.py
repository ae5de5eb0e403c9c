"""Capture plans from real H200 timelines: steps chosen per launch sequence, windows, and the rule's own entry point."""

import json
from dataclasses import asdict

import pandas as pd
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


def _grid_blocks(grid: str) -> int:
    x, y, z = (int(v) for v in grid.strip("()").split(","))
    return x * y * z


def test_a_new_launch_sequence_profiles_only_where_it_differs_and_the_rest_stand_in(tmp_path):
    """Capture mode 'differences' on four iterations of transformers' continuous batching of a 1B Llama on an H200
    (the prefill, the first decode at batch 64, and iterations 30 and 39, whose batches left cuBLAS choosing other
    GEMM kernels: four launch sequences). Iteration 30 has as many launches as iteration 1 and differs from it only
    in some kernels, so its launches compare position by position (not difflib, which the plan uses): each position
    whose kernel, block or grid (beyond 2x) differs is profiled; every other launch of it is profiled or stands in
    for iteration 1's launch at its position. The sampled steps' windows are those of mode representatives."""
    tl = attribution.read_timeline(DATA / "h200_serving" / "timeline.sqlite", "nsightflow")
    whole = plan.plan_capture(tl, "nsightflow", ["first", "last"], "representatives")
    diff = plan.plan_capture(tl, "nsightflow", ["first", "last"], "differences")
    s = diff.stages["iteration"]
    assert (s.sampled_steps, s.extra_steps) == ([0, 39], [1, 30])
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    one, mine = (ranged[ranged["step"] == n].sort_values("seq").reset_index(drop=True) for n in (1, 30))
    assert len(one) == len(mine) == 776
    differs = (
        (one["mangled"] != mine["mangled"])
        | (one["block"] != mine["block"])
        | pd.Series(
            [
                max(a, b) > 2 * min(a, b)
                for a, b in zip(map(_grid_blocks, one["grid"]), map(_grid_blocks, mine["grid"]), strict=True)
            ]
        )
    )
    assert 0 < differs.sum() < 776
    planned = {e.class_key for e in diff.expected if e.step == 30}
    assert set(mine.loc[differs, "class_key"]) <= planned  # every launch that differs is profiled
    stand = next(x for x in s.stand_ins if x.step == 30)
    assert stand.reference == 1
    assert all(seq == ref for seq, ref in stand.pairs)  # equal lengths, substitutions only: position for position
    stood = {seq for seq, _ in stand.pairs}
    for i, row in mine.iterrows():
        assert (row["class_key"] in planned) != (int(row["seq"]) in stood), (i, row["kernel"])
    assert not stood & set(mine.loc[differs, "seq"])
    # fewer launches profiled, the same windows in the sampled steps
    assert len(diff.expected) < len(whole.expected)
    for step in (0, 39):
        assert [asdict(e) for e in diff.expected if e.step == step] == [
            asdict(e) for e in whole.expected if e.step == step
        ]
    # the plan file keeps its stand-ins
    diff.write(tmp_path / "plan.json")
    again = plan.CapturePlan.read(tmp_path / "plan.json")
    assert again.stages["iteration"].stand_ins == s.stand_ins
    frame = plan.stand_in_frame(again)
    assert len(frame) == sum(len(x.pairs) for x in s.stand_ins)
    assert list(frame.columns) == ["stage", "step", "seq", "ref_step", "ref_seq"]
