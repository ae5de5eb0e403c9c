"""nsys stats readers (analysis of captures without a SQLite export) and commands, on a real H200 timeline."""

import csv

from conftest import DATA

from nsightflow.capture.launch import nsys
from nsightflow.capture.read import nsys_stats

D = DATA / "h200_tinyllm"


def _kern_rows():
    return list(csv.DictReader((D / "stats" / "nvtx_kern_sum.csv").open()))


def test_kernel_table_totals_match_csv():
    table = nsys_stats.kernel_table(D / "stats" / "nvtx_kern_sum.csv")
    for label, stage in (("nsightflow:prefill", "prefill"), ("nsightflow:decode", "decode")):
        rows = [r for r in _kern_rows() if r["NVTX Range"] == label]
        got = table[table.stage == stage]
        assert len(got) == len(rows)
        assert got["total_ns"].sum() == sum(float(r["Total Time (ns)"]) for r in rows)
        assert got["instances"].sum() == sum(int(r["Kern Inst"]) for r in rows)
    assert set(table["domain"]) == {"nsightflow"}
    # Kernels outside any range (the warm-up) are not a stage.
    assert set(table["stage"]) == {"prefill", "decode"}


def test_launches_per_step_is_instances_over_ranges():
    table = nsys_stats.kernel_table(D / "stats" / "nvtx_kern_sum.csv")
    dec = table[table.stage == "decode"]
    assert (dec["range_instances"] == 8).all()
    assert (dec["launches_per_range"] == dec["instances"] / 8).all()


def test_stage_table_reads_wall_time():
    stages = nsys_stats.stage_table(D / "stats" / "nvtx_sum.csv").set_index("stage")
    rows = {r["Range"]: r for r in csv.DictReader((D / "stats" / "nvtx_sum.csv").open())}
    assert stages.loc["decode", "wall_ns"] == float(rows["nsightflow:decode"]["Total Time (ns)"])
    assert stages.loc["decode", "range_instances"] == 8
    assert stages.loc["prefill", "range_instances"] == 1


def test_gpu_name_and_commands():
    assert nsys_stats.gpu_name(D / "timeline.sqlite") == "NVIDIA H200"
    argv = nsys.stats_argv("nsys", "t.nsys-rep", "out/stats")
    assert argv[:2] == ["nsys", "stats"] and argv[-1] == "t.nsys-rep"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--report"] == list(nsys.STATS_REPORTS)
    prof = nsys.profile_argv("nsys", "out/t", ["python", "-c", "print('$(x); y')"])
    assert "--trace=cuda,nvtx" in prof and prof[-3:] == ["python", "-c", "print('$(x); y')"]
    # Graph kernels one by one, and the SQLite export from the same nsys call.
    assert "--cuda-graph-trace=node" in prof and "--export=sqlite" in prof


def test_split_range():
    assert nsys_stats.split_range("LLM:LLM@prefill") == ("LLM", "LLM@prefill")
    assert nsys_stats.split_range("prefill") == ("", "prefill")
