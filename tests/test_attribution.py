"""Attribution by time window on real H200 timelines, checked against nsys's own projection and raw SQLite rows."""

import csv
import sqlite3

import numpy as np
import pytest
from conftest import DATA

from nsightflow.capture.read import attribution
from nsightflow.errors import TimelineError

D = DATA / "h200_tinyllm"


@pytest.fixture(scope="module")
def tl():
    return attribution.read_timeline(D / "timeline.sqlite", "nsightflow")


def test_single_threaded_timeline_agrees_with_nsys_projection(tl):
    # One thread launches everything here, so nsys' per-thread projection (nvtx_kern_sum) is the truth.
    rows = list(csv.DictReader((D / "stats" / "nvtx_kern_sum.csv").open()))
    table = attribution.kernel_table(tl)
    for label, stage in (("nsightflow:prefill", "prefill"), ("nsightflow:decode", "decode")):
        mine = [r for r in rows if r["NVTX Range"] == label]
        got = table[table["stage"] == stage].set_index("kernel")
        assert len(got) == len(mine)
        for r in mine:
            assert got.loc[r["Kernel Name"], "instances"] == int(r["Kern Inst"])
            assert got.loc[r["Kernel Name"], "total_ns"] == float(r["Total Time (ns)"])
    nvtx_sum = {r["Range"]: r for r in csv.DictReader((D / "stats" / "nvtx_sum.csv").open())}
    st = attribution.stage_table(tl).set_index("stage")
    assert st.loc["decode", "wall_ns"] == float(nvtx_sum["nsightflow:decode"]["Total Time (ns)"])
    assert st.loc["decode", "range_instances"] == 8 and st.loc["prefill", "range_instances"] == 1


def test_steps_payloads_and_launch_order(tl):
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    dec = ranged[ranged["stage"] == "decode"]
    assert sorted(dec["step"].unique()) == list(range(8))
    assert (dec.groupby("step").size() == 136).all() and (dec["step"] == dec["range_index"]).all()
    assert (dec.groupby("step")["seq"].apply(lambda s: list(s) == list(range(136)))).all()
    # No probe pass in this (older) timeline: nothing is attributed to one.
    assert set(tl.launches["pass_"]) == {"ranged"} and (tl.launches["unit"] == -1).all()


def test_rows_come_from_the_sqlite_cells(tl):
    con = sqlite3.connect(D / "timeline.sqlite")
    first = tl.launches[tl.launches["stage"] == "prefill"].sort_values("seq").iloc[0]
    row = con.execute(
        "SELECT k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k.dynamicSharedMemory, "
        "m.value, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds m ON m.id = k.mangledName "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "WHERE k.start = ?",
        (int(first["start"]),),
    ).fetchone()
    assert first["grid"] == f"({row[0]}, {row[1]}, {row[2]})" and first["block"] == f"({row[3]}, {row[4]}, {row[5]})"
    assert first["smem"] == row[6] and first["mangled"] == row[7] and first["launch_ns"] == row[8]
    assert first["class_key"] == f"{row[7]}|{first['grid']}|{first['block']}|{row[6]}"
    # Every launch's call lies inside its range's window.
    r = tl.ranges.set_index(["stage", "step"])
    for _, k in tl.launches.sample(200, random_state=0).iterrows():
        lo, hi = r.loc[(k["stage"], k["step"]), ["start", "end"]]
        assert lo <= k["launch_ns"] <= hi


def test_the_domain_is_guessed_when_not_given():
    tl = attribution.read_timeline(D / "timeline.sqlite", None)
    assert set(tl.ranges["stage"]) == {"prefill", "decode"}


def test_owner_of_times_in_disjoint_windows():
    starts, ends = np.array([10, 20, 40]), np.array([15, 30, 50])
    got = attribution.window_of(np.array([5, 10, 15, 16, 25, 30, 39, 45, 60]), starts, ends)
    assert got.tolist() == [-1, 0, 0, -1, 1, 1, -1, 2, -1]


def test_bad_exports_are_named(tmp_path):
    bad = tmp_path / "t.sqlite"
    bad.write_text("not a database")
    with pytest.raises(TimelineError, match="t.sqlite: not a readable SQLite database"):
        attribution.read_timeline(bad, "nsightflow")
    empty = tmp_path / "e.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(TimelineError, match="e.sqlite: the export has no"):
        attribution.read_timeline(empty, "nsightflow")
    with pytest.raises(FileNotFoundError, match="nsys export --type sqlite"):
        attribution.read_timeline(tmp_path / "missing.sqlite", "nsightflow")
