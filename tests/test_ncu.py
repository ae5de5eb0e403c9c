"""ncu filters, sampling plans and raw-CSV parsing, on real exports from the GPU host."""

import csv
import io
import json
import re
import sqlite3

import pytest

from conftest import DATA
from nsightflow import ncu, nsys
from nsightflow.select import select_kernels

D = DATA / "h200_tinyllm"


def test_nvtx_include_forms_seen_to_work_on_the_gpu_host():
    # Both forms profiled kernels with ncu 2025.3.1 on the H200 (see ../shared/gpu-host and at_range.raw.csv).
    assert ncu.nvtx_include("nsightflow", "decode") == "nsightflow@decode/"
    assert ncu.nvtx_include("LLM", "LLM@prefill") == r"regex:LLM@^LLM\x40prefill$/"
    assert ncu.nvtx_include("", "a b") == r"regex:^a b$/"
    assert ncu.nvtx_include("d", "x/y(z)") == r"regex:d@^x\x2fy\(z\)$/"
    with pytest.raises(ncu.CaptureError, match="domain"):
        ncu.nvtx_include("my dom", "r")


def test_kernel_name_filter_matches_exactly_the_nsys_names():
    names = [r["Kernel Name"] for r in csv.DictReader((D / "stats" / "nvtx_kern_sum.csv").open())]
    chosen, others = names[:5], set(names[5:]) - set(names[:5])
    value = ncu.kernel_name_filter(chosen)
    assert value.startswith("regex:")
    rx = re.compile(value[len("regex:"):])
    assert all(rx.fullmatch(n) for n in chosen)
    assert not any(rx.fullmatch(n) for n in others)


def test_resolve_steps():
    assert ncu.resolve_steps(["first", "middle", "last"], 8) == [0, 3, 7]
    assert ncu.resolve_steps(["every:3"], 8) == [0, 3, 6]
    assert ncu.resolve_steps([5, "first"], 8) == [0, 5]
    with pytest.raises(ValueError, match="outside"):
        ncu.resolve_steps([8], 8)
    with pytest.raises(ValueError, match="every:K"):
        ncu.resolve_steps(["sometimes"], 8)


def test_plan_skips_whole_steps_of_launches():
    kernels = nsys.kernel_table(D / "stats" / "nvtx_kern_sum.csv")
    seq = nsys.launch_sequence(D / "timeline.sqlite")
    rows = [r for r in csv.DictReader((D / "stats" / "nvtx_kern_sum.csv").open()) if r["NVTX Range"] == "nsightflow:decode"]
    per_step = sum(int(r["Kern Inst"]) for r in rows) // 8  # 136
    plans = {p.capture_id: p for p in ncu.plan_captures(seq, select_kernels(kernels, None, 1.0), ["first", "middle", "last"])}
    assert set(plans) == {"prefill", "decode.step0", "decode.step3", "decode.step7"}
    assert (plans["decode.step3"].launch_skip, plans["decode.step3"].launch_count) == (3 * per_step, per_step)
    assert (plans["decode.step7"].launch_skip, plans["decode.step7"].launch_count) == (7 * per_step, per_step)
    assert plans["prefill"].launch_skip == 0
    # The committed plan the GPU host ran agrees with a fresh one.
    ran = json.loads((D / "plans" / "decode.step3.json").read_text())
    assert (ran["launch_skip"], ran["launch_count"]) == (3 * per_step, per_step)
    # With a kernel filter, only matching launches are counted.
    top = select_kernels(kernels, 2, None)
    filt = {p.capture_id: p for p in ncu.plan_captures(seq, top, ["last"])}
    dec_top = top[top.stage == "decode"]["kernel"]
    expected = sum(int(r["Kern Inst"]) for r in rows if r["Kernel Name"] in set(dec_top)) // 8
    assert filt["decode.step7"].launch_count == expected
    assert filt["decode.step7"].launch_skip == 7 * expected
    # The filter names the kernels by their mangled names, read here straight from the SQLite export.
    con = sqlite3.connect(D / "timeline.sqlite")
    mangled_of = dict(con.execute("SELECT d.value, m.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                  "JOIN StringIds d ON d.id = k.demangledName JOIN StringIds m ON m.id = k.mangledName"))
    assert filt["decode.step7"].kernels == sorted(mangled_of[k] for k in dec_top)
    rx = re.compile(ncu.kernel_name_filter(filt["decode.step7"].kernels)[len("regex:"):])
    assert {m for m in mangled_of.values() if rx.fullmatch(m)} == {mangled_of[k] for k in dec_top}
    argv = ncu.capture_argv("ncu", "out", ["prog"], nvtx_expr="nsightflow@decode/", kernels=filt["decode.step7"].kernels)
    assert argv[argv.index("--kernel-name-base") + 1] == "mangled"


def test_parse_raw_csv_real_export():
    df, units = ncu.parse_raw_csv(D / "decode.step3.raw.csv")
    raw = list(csv.reader((D / "decode.step3.raw.csv").open()))
    assert len(df) == len(raw) - 2 == 136
    assert units["gpu__time_duration.sum"] == "ns"
    col = raw[0].index("dram__bytes_read.sum")
    assert df["dram__bytes_read.sum"].tolist() == [float(r[col].replace(",", "")) for r in raw[2:]]
    assert df["dram__bytes.sum.peak_sustained"].iloc[0] == 1504.0  # printed "1,504"
    # The harness marks each decode step with its index as the NVTX payload.
    assert set(df["nvtx_range"]) == {"decode"} and set(df["nvtx_payload"]) == {3}
    assert set(df["nvtx_domain"]) == {"nsightflow"}


def test_parse_nvtx_with_at_sign_range():
    df, _ = ncu.parse_raw_csv(D / "at_range.raw.csv")
    assert set(df["nvtx_domain"]) == {"LLM"}
    assert set(df["nvtx_range"]) == {"LLM@prefill"}
    assert sorted(set(df["nvtx_payload"])) == [0, 1]


def test_parse_raw_csv_rejects_bad_input(tmp_path):
    good = (D / "decode.step3.raw.csv").read_text().splitlines()
    (tmp_path / "trunc.csv").write_text("\n".join(good[:3] + [good[3][: len(good[3]) // 2]]) + "\n")
    with pytest.raises(ValueError, match="truncated"):
        ncu.parse_raw_csv(tmp_path / "trunc.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="not an ncu raw CSV"):
        ncu.parse_raw_csv(tmp_path / "empty.csv")
    (tmp_path / "other.csv").write_text((D / "stats" / "nvtx_sum.csv").read_text())
    with pytest.raises(ValueError, match="--page raw --csv"):
        ncu.parse_raw_csv(tmp_path / "other.csv")


def test_check_capture_diagnoses_real_failures():
    empty = (D / "ncu_no_kernels.log").read_text()
    with pytest.raises(ncu.CaptureError) as err:
        ncu.check_capture(empty, 0, what="stage 'decode'", ranges_seen=["nsightflow:decode", "nsightflow:prefill"])
    assert "No kernels were profiled" in str(err.value) and "nsightflow:decode, nsightflow:prefill" in str(err.value)
    refused = (D / "ncu_range_replay_decode.log").read_text()
    with pytest.raises(ncu.CaptureError, match="app-range"):
        ncu.check_capture(refused, 9, what="decode", ranges_seen=[])
    ncu.check_capture("==PROF== Profiling \"k\": 100%\n", 0, what="x", ranges_seen=[])


def test_capture_argv_is_a_list_with_names_intact():
    name = "a\"b;$(rm -rf x)\n@/ c"
    argv = ncu.capture_argv("ncu", "out/c", ["python", "-m", "m"], nvtx_expr=ncu.nvtx_include("", name),
                            kernels=[name], launch_skip=3, launch_count=2, metrics=["m1", "m2"])
    assert argv[argv.index("--launch-skip") + 1] == "3" and argv[argv.index("--launch-count") + 1] == "2"
    assert "--clock-control=none" in argv and argv[-3:] == ["python", "-m", "m"]
    rx = re.compile(argv[argv.index("--kernel-name") + 1][len("regex:"):])
    assert rx.fullmatch(name)


def test_units_scale_to_base_and_unknown_units_fail_only_where_read():
    assert ncu.unit_factor("Mbyte") == (1e6, False) and ncu.unit_factor("usecond") == (1e-6, True)
    assert ncu.unit_factor("cycle/nsecond") == (1e9, False) and ncu.unit_factor("byte/cycle") == (1.0, False)
    assert ncu.unit_factor("frobs") is None
    rows = list(csv.reader((D / "prefill.raw.csv").open()))
    i = rows[0].index("dram__bytes_read.sum")
    rows[1][i] = "Kbyte"  # as auto units print it: the same cells now mean thousands of bytes
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
    df, _ = ncu.parse_raw_csv(text.getvalue())
    assert df["dram__bytes_read.sum"].iloc[0] == 1000 * float(rows[2][i].replace(",", ""))
    rows[1][i] = "frobs"
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
    with pytest.raises(ValueError, match="print-units base"):
        ncu.parse_raw_csv(text.getvalue())


def test_auto_unit_export_matches_the_base_unit_export():
    # One real report exported both ways on the GPU host; auto units print 'us', 'Mbyte', 'Ghz', ...
    A = DATA / "h200_autounits"
    auto, units = ncu.parse_raw_csv(A / "prefill.auto.raw.csv")
    base, _ = ncu.parse_raw_csv(A / "prefill.base.raw.csv")
    assert units["gpu__time_duration.sum"] == "us" and units["dram__bytes_read.sum"] == "Mbyte"
    rows = list(csv.reader((A / "prefill.base.raw.csv").open()))
    for metric in ("gpu__time_duration.sum", "dram__bytes_read.sum", "sm__cycles_elapsed.avg.per_second",
                   "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "lts__t_bytes.sum"):
        i = rows[0].index(metric)
        cells = [float(r[i].replace(",", "")) for r in rows[2:]]
        assert auto[metric].tolist() == pytest.approx(cells, rel=5e-3), metric  # auto units round to ~4 digits
        assert base[metric].tolist() == cells


def test_partial_and_empty_captures_from_the_gpu_host_are_refused():
    F = DATA / "h200_tinyllm_filtered"
    # The demangled-name filter on prefill profiled 63 of the 79 planned launches (exit code 0).
    log = (F / "ncu_demangled_filter_prefill.log").read_text()
    assert ncu.profiled_count(log) == 63
    with pytest.raises(ncu.CaptureError, match="profiled 63 of the 79 launches planned"):
        ncu.check_capture(log, 0, what="prefill", ranges_seen=["nsightflow:prefill"], domain="nsightflow",
                          stage="prefill", expected=79)
    ncu.check_capture(log, 0, what="prefill", ranges_seen=[], expected=63)  # as planned: accepted
    # On decode step 7 it profiled nothing; the diagnosis names the ranges the timeline saw.
    log = (F / "ncu_demangled_filter_decode.log").read_text()
    with pytest.raises(ncu.CaptureError, match="No kernels were profiled") as err:
        ncu.check_capture(log, 0, what="decode", ranges_seen=["nsightflow:prefill", "nsightflow:decode"],
                          domain="nsightflow", stage="decode", expected=78)
    assert "nsightflow:decode" in str(err.value)
    # A stage seen under another domain gets the corrected expression.
    with pytest.raises(ncu.CaptureError, match="corrected expression 'LLM@decode/'"):
        ncu.check_capture(log, 0, what="decode", ranges_seen=["LLM:decode"], domain="nsightflow", stage="decode")


def test_ranges_are_checked_before_ncu_runs():
    from nsightflow.capture import check_ranges

    stages = nsys.stage_table(D / "stats" / "nvtx_sum.csv")
    kernels = nsys.kernel_table(D / "stats" / "nvtx_kern_sum.csv")
    check_ranges(stages, kernels, "nsightflow")
    with pytest.raises(ValueError, match="no NVTX range in domain 'LLM'; ranges it saw .*nsightflow:decode"):
        check_ranges(stages, kernels, "LLM")
    with pytest.raises(ValueError, match=r"no GPU kernels were launched inside the NVTX ranges of stage\(s\) \['decode'\]"):
        check_ranges(stages, kernels[kernels["stage"] != "decode"], "nsightflow")
