"""Two runs compared (nsightflow.analysis.diff), on two real recordings of the default decoder on an H200 made with
different nsightflow versions (tests/data/h200_v2/default, h200_v3/default)."""

from __future__ import annotations

import pytest
from conftest import DATA, aggregate_recorded

from nsightflow.analysis.diff import kernel_diff, stage_diff, summary_lines


@pytest.fixture(scope="module")
def runs():
    v2 = DATA / "h200_v2" / "default"
    v3 = DATA / "h200_v3" / "default"
    return aggregate_recorded(v2), aggregate_recorded(v3, manifest_json=v3 / "manifest.json")


def test_stages_side_by_side(runs):
    before, after = runs
    d = stage_diff(before.stages, after.stages).set_index("stage")
    b, a = before.stages.set_index("stage"), after.stages.set_index("stage")
    for stage in ("prefill", "decode"):
        assert d.loc[stage, "presence"] == "both"
        assert d.loc[stage, "wall_ms_change"] == pytest.approx(a.loc[stage, "wall_ms"] / b.loc[stage, "wall_ms"] - 1)
        assert (
            d.loc[stage, "bound_before"] == b.loc[stage, "bound"]
            and d.loc[stage, "bound_after"] == a.loc[stage, "bound"]
        )
    lines = summary_lines(d.reset_index())
    assert lines[0].startswith(
        f"prefill: wall {b.loc['prefill', 'wall_ms']:.3g} → {a.loc['prefill', 'wall_ms']:.3g} ms"
    )


def test_kernels_added_removed_and_changed_account_for_the_whole_difference(runs):
    before, after = runs
    k = kernel_diff(before.kernels, after.kernels)
    for stage in ("prefill", "decode"):
        mine = k[k["stage"] == stage]
        total = (
            after.kernels.loc[after.kernels["stage"] == stage, "total_ns"].sum()
            - before.kernels.loc[before.kernels["stage"] == stage, "total_ns"].sum()
        )
        assert mine["delta_ns"].sum() == pytest.approx(total)
    keys_b = set(zip(before.kernels["stage"], before.kernels["kernel"], strict=True))
    keys_a = set(zip(after.kernels["stage"], after.kernels["kernel"], strict=True))
    assert set(k.loc[k["status"] == "added", ["stage", "kernel"]].itertuples(index=False)) == keys_a - keys_b
    assert set(k.loc[k["status"] == "removed", ["stage", "kernel"]].itertuples(index=False)) == keys_b - keys_a
    assert (k["delta_ns"].abs().diff().dropna() <= 0).all()  # largest change first


def test_a_stage_in_one_run_only():
    import pandas as pd

    a = pd.DataFrame(
        {"stage": ["prefill", "decode"], "wall_ms": [1.0, 2.0], "gpu_busy_ms": [0.5, 1.0], "bound": ["x", "y"]}
    )
    b = pd.DataFrame({"stage": ["prefill"], "wall_ms": [0.5], "gpu_busy_ms": [0.5], "bound": ["x"]})
    d = stage_diff(a, b).set_index("stage")
    assert d.loc["decode", "presence"] == "removed" and d.loc["prefill", "wall_ms_change"] == -0.5
    assert summary_lines(d.reset_index())[1] == "decode: only before"
