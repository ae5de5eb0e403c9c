"""Analysis of captures made elsewhere believes nothing unchecked: cut, edited and corrupt files from the H200
fixtures fail naming the file and what disagreed, or show as lost coverage; a missing cell is never a zero."""

import csv
import json
import re
import shutil
import sqlite3

import pandas as pd
import pytest
from conftest import DATA, EVERY_CLASS, copy_workflow, snakemake

from nsightflow.analysis import captures, diagnostics
from nsightflow.capture.launch import imported

F = DATA / "h200_tinyllm_filtered"


def _copy(tmp_path, sqlite=True):
    """The older filtered H200 run as a captures directory; without the SQLite export, times only (no ncu)."""
    caps = tmp_path / "caps"
    caps.mkdir()
    exports = ("prefill.raw.csv", "decode.step0.raw.csv", "decode.step3.raw.csv", "decode.step7.raw.csv")
    for f in ("stats/nvtx_sum.csv", "stats/nvtx_kern_sum.csv", "analytic_flops.json") + (exports if sqlite else ()):
        shutil.copy(F / f, caps / f.replace("/", "_"))
    if sqlite:
        shutil.copy(F / "timeline.sqlite", caps / "timeline.sqlite")
    return caps


def _analyse(caps, tmp_path):
    out = tmp_path / "imported"
    imported.import_captures(caps, out)
    return captures.aggregate_captures(out, EVERY_CLASS)


def _rows(path):
    return list(csv.reader(path.open()))


def _write(path, rows):
    with path.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)


def test_an_na_cell_in_an_ncu_flop_counter_is_lost_coverage_not_a_zero(tmp_path):
    caps = _copy(tmp_path)
    full = _analyse(caps, tmp_path / "a").stages.set_index("stage")
    rows = _rows(caps / "decode.step3.raw.csv")
    col = rows[0].index("sm__ops_path_tensor_src_bf16_dst_fp32.sum")
    row = max(range(2, len(rows)), key=lambda i: float(rows[i][col].replace(",", "")))  # the biggest GEMM
    rows[row][col] = "n/a"
    _write(caps / "decode.step3.raw.csv", rows)
    got = _analyse(caps, tmp_path / "b")
    st = got.stages.set_index("stage")
    assert st.loc["decode", "coverage"] < full.loc["decode", "coverage"]
    assert st.loc["prefill", "flops_measured"] == full.loc["prefill", "flops_measured"]
    said = [d for d in diagnostics.diagnose(got, []) if d.source == "decode"]
    assert [d.level for d in said if "counters cover" in d.message] == ["warning"]


def test_an_ncu_export_cut_at_a_row_boundary_shows_as_lost_coverage(tmp_path):
    caps = _copy(tmp_path)
    full = _analyse(caps, tmp_path / "a").stages.set_index("stage")
    rows = _rows(caps / "decode.step7.raw.csv")
    _write(caps / "decode.step7.raw.csv", rows[:12])  # header, units and 10 of the step's results
    st = _analyse(caps, tmp_path / "b").stages.set_index("stage")
    assert st.loc["decode", "coverage"] < full.loc["decode", "coverage"]


def test_stats_exports_are_read_strictly(tmp_path):
    caps = _copy(tmp_path, sqlite=False)  # times only: the stats CSVs are all there is
    rows = _rows(caps / "stats_nvtx_kern_sum.csv")
    col = rows[0].index("Total Time (ns)")
    rows[5][col] = "n/a"
    _write(caps / "stats_nvtx_kern_sum.csv", rows)
    # the error names the user's own file (the import's index.json keeps where each came from)
    user = re.escape(str(caps / "stats_nvtx_kern_sum.csv"))
    with pytest.raises(ValueError, match=user + r": row 6, column 'Total Time \(ns\)': 'n/a' is not"):
        _analyse(caps, tmp_path / "a")
    # Cut where one stage's rows begin: that stage has ranges but no kernels.
    rows = _rows(F / "stats" / "nvtx_kern_sum.csv")
    first = next(i for i, r in enumerate(rows) if r[0].endswith(":prefill"))
    _write(caps / "stats_nvtx_kern_sum.csv", rows[:first])
    with pytest.raises(ValueError, match=r"nvtx_sum has ranges of stage\(s\) \['prefill'\] that nvtx_kern_sum has no"):
        _analyse(caps, tmp_path / "b")
    # Two headers swapped: the kernel time is read from the launch counts; no kernel runs that fast.
    rows = _rows(F / "stats" / "nvtx_kern_sum.csv")
    a, b = rows[0].index("Total Time (ns)"), rows[0].index("Kern Inst")
    rows[0][a], rows[0][b] = rows[0][b], rows[0][a]
    _write(caps / "stats_nvtx_kern_sum.csv", rows)
    with pytest.raises(ValueError, match="ns per launch; no GPU kernel completes in under 100 ns"):
        _analyse(caps, tmp_path / "c")


def test_a_utilisation_no_device_can_reach_is_refused(tmp_path):
    caps = _copy(tmp_path)
    data = json.loads((caps / "analytic_flops.json").read_text())
    data["stages"]["prefill"]["flops_causal_adjusted"] *= 100  # the count of another (bigger) workload
    (caps / "analytic_flops.json").write_text(json.dumps(data))
    with pytest.raises(
        ValueError,
        match=r"stage 'prefill': mfu_busy is .* of the compute peak \(ncu: .*beyond the "
        r"1.05 any device allows",
    ):
        _analyse(caps, tmp_path / "a")


def test_negative_analytic_counts_and_a_corrupt_sqlite_are_named(tmp_path):
    caps = _copy(tmp_path)
    data = json.loads((caps / "analytic_flops.json").read_text())
    data["stages"]["decode"]["flops"] = -5
    (caps / "analytic_flops.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"analytic_flops.json: stage 'decode': flops is -5"):
        _analyse(caps, tmp_path / "a")
    shutil.copy(F / "analytic_flops.json", caps / "analytic_flops.json")
    blob = (caps / "timeline.sqlite").read_bytes()
    (caps / "timeline.sqlite").write_bytes(blob[: len(blob) // 3])  # cut short
    with pytest.raises(imported.CapturesError, match="timeline.sqlite: an SQLite database that cannot be read"):
        _analyse(caps, tmp_path / "b")
    assert not (tmp_path / "b" / "imported.tmp").exists() and not list(tmp_path.rglob("*.tmp"))


def test_a_failed_analysis_run_names_the_file_and_leaves_no_output(tmp_path):
    caps = _copy(tmp_path)
    rows = _rows(caps / "stats_nvtx_kern_sum.csv")
    _write(caps / "stats_nvtx_kern_sum.csv", rows)  # unchanged: the SQLite export is what the analysis uses
    sq = caps / "timeline.sqlite"
    con = sqlite3.connect(sq)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.commit()
    con.close()
    wf = copy_workflow(tmp_path / "wf")
    proc = snakemake(wf, "--cores", "1", "results/report.html", "--config", f"captures={caps}", check=False)
    assert proc.returncode != 0 and "the export has no ['CUPTI_ACTIVITY_KIND_RUNTIME'] table" in proc.stdout
    out = wf / "results" / "captures" / "caps"
    assert not (out / "stages.csv").exists() and not list(out.glob("imported.tmp"))
    assert pd.read_csv(F / "gpu_host_stages.csv").shape[0] == 2  # the fixture itself is untouched


def test_stats_and_sqlite_of_different_runs_are_refused(tmp_path):
    caps = _copy(tmp_path)
    rows = _rows(caps / "stats_nvtx_sum.csv")
    col = rows[0].index("Instances")
    i = next(i for i, r in enumerate(rows) if r[-1].endswith(":decode"))
    rows[i][col] = "7"  # one decode range fewer than the SQLite export has
    _write(caps / "stats_nvtx_sum.csv", rows)
    with pytest.raises(ValueError, match=r"disagree on the ranges per stage \(stats, SQLite\): \{'decode': \(7, 8\)\}"):
        _analyse(caps, tmp_path / "a")
