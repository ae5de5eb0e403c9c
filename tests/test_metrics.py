"""FLOPs, bytes, peaks and stage MFU from real captures, against sums taken straight from the CSVs."""

import csv
import statistics

import numpy as np
import pandas as pd
import pytest
from conftest import DATA, DEFAULT_FOCUS, aggregate_recorded

from nsightflow.analysis import aggregate, diagnostics, metrics, peaks
from nsightflow.capture.read import attribution, matching, ncu_csv, plan

D = DATA / "h200_tinyllm"


def _cells(path, metric):
    rows = list(csv.reader(path.open()))
    i = rows[0].index(metric)
    return [float(r[i].replace(",", "")) for r in rows[2:]]


SASS = {"fadd": 1, "fmul": 1, "ffma": 2, "dadd": 1, "dmul": 1, "dfma": 2, "hadd": 2, "hmul": 2, "hfma": 4}


def _all_flops(path):
    """Tensor-pipe FLOPs plus SASS FLOPs (FMA = 2, half2 = 2 lanes), summed from the CSV cells."""
    tensor = sum(
        sum(_cells(path, f"sm__ops_path_tensor_src_{p}.sum"))
        for p in ("bf16_dst_fp32", "fp16", "tf32_dst_fp32", "fp8", "fp64")
    )
    return tensor + sum(
        k * sum(_cells(path, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum")) for op, k in SASS.items()
    )


def test_result_flops_follow_the_counting_rules():
    raw, _ = ncu_csv.parse_raw_csv(D / "prefill.raw.csv")
    res = ncu_csv.result_metrics(raw)
    p = D / "prefill.raw.csv"
    tensor = sum(_cells(p, "sm__ops_path_tensor_src_bf16_dst_fp32.sum"))
    fp32 = (
        sum(_cells(p, "sm__sass_thread_inst_executed_op_fadd_pred_on.sum"))
        + sum(_cells(p, "sm__sass_thread_inst_executed_op_fmul_pred_on.sum"))
        + 2 * sum(_cells(p, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"))
    )
    assert res["flops_tensor_bf16"].sum() == tensor
    assert res["flops_fp32"].sum() == fp32
    assert res["flops"].sum() == pytest.approx(_all_flops(p), rel=1e-12)
    assert res["dram_bytes"].sum() == sum(_cells(p, "dram__bytes_read.sum")) + sum(_cells(p, "dram__bytes_write.sum"))


def test_peaks_come_from_the_capture_with_their_source():
    raw, _ = ncu_csv.parse_raw_csv(D / "prefill.raw.csv")
    pk = peaks.peaks(ncu_csv.result_metrics(raw), "NVIDIA H200", "bf16")
    clock = statistics.median(_cells(D / "prefill.raw.csv", "sm__cycles_elapsed.avg.per_second"))
    assert pk.compute == pytest.approx(540672 * clock)  # dense hgmma rate, not the sparse aggregate
    assert "sparsity_off" in pk.compute_source
    dram_clock = statistics.median(_cells(D / "prefill.raw.csv", "dram__cycles_elapsed.avg.per_second"))
    assert pk.dram == pytest.approx(1504 * dram_clock)
    assert pk.datasheet_compute == 989.4e12
    fallback = peaks.peaks(ncu_csv.result_metrics(raw).assign(bf16_dense_per_cycle=0.0), "NVIDIA H200", "bf16")
    assert fallback.compute == 989.4e12 and "datasheet" in fallback.compute_source


def _matched(folder, captures, sample_steps):
    """The ncu results of whole-step captures joined to a plan made from the same timeline."""
    tl = attribution.read_timeline(folder / "timeline.sqlite", "nsightflow")
    exp = plan.expected_frame(plan.plan_capture(tl, "nsightflow", sample_steps, "every_launch"))
    parts, start = [], 0
    for cap in captures:
        raw, _ = ncu_csv.parse_raw_csv(folder / f"{cap}.raw.csv")
        res = ncu_csv.result_metrics(raw)
        parts.append(matching.match_to_plan(res, exp.iloc[start : start + len(res)], cap))
        start += len(res)
    assert start == len(exp)
    return tl, pd.concat(parts, ignore_index=True)


def test_results_are_joined_to_the_plan_by_order_grid_block_and_name():
    tl, matched = _matched(D, ["prefill", "decode.step3"], [3])
    assert len(matched) == 128 + 136 and set(matched["step"]) == {0, 3}
    raw, _ = ncu_csv.parse_raw_csv(D / "prefill.raw.csv")
    res = ncu_csv.result_metrics(raw)
    exp = plan.expected_frame(plan.plan_capture(tl, "nsightflow", [3], "every_launch")).iloc[:128]
    broken = exp.copy()
    broken.loc[5, "grid"] = "(1, 1, 1)"
    with pytest.raises(matching.MatchError, match="result 5 .* differs from the planned launch"):
        matching.match_to_plan(res, broken, "prefill")
    swapped = exp.copy()
    swapped.loc[7, "kernel"] = exp.loc[8, "kernel"] if exp.loc[8, "kernel"] != exp.loc[7, "kernel"] else "other"
    with pytest.raises(matching.MatchError, match="differs from the planned launch"):
        matching.match_to_plan(res, swapped, "prefill")
    # A Triton kernel (the names made so) planned with another block: the autotuner's choice, named as the cause.
    tuned, res_tuned = exp.copy(), res.copy()
    tuned.loc[5, ["kernel", "mangled", "block"]] = ["triton_per_fused_mean_0", "triton_per_fused_mean_0", "(256, 1, 1)"]
    res_tuned.loc[res_tuned["ncu_id"] == res["ncu_id"].min() + 5, "ncu_kernel"] = "triton_per_fused_mean_0"
    with pytest.raises(matching.MatchError, match="result 5 .* Triton kernel ran with another launch shape"):
        matching.match_to_plan(res_tuned, tuned, "prefill")
    with pytest.raises(matching.MatchError, match="the plan names 127"):
        matching.match_to_plan(res, exp.iloc[:127], "prefill")


def test_stage_numbers_scale_each_class_with_its_timeline_launches():
    tl, matched = _matched(D, ["prefill", "decode.step3"], [3])
    model = aggregate.load_analytic(D / "analytic_flops.json")
    raw, _ = ncu_csv.parse_raw_csv(D / "prefill.raw.csv")
    pk = peaks.peaks(ncu_csv.result_metrics(raw), "NVIDIA H200", "bf16")
    windowed = set(zip(matched["stage"], matched["step"], strict=True))
    classes, kernels, st, _ = aggregate.tables(tl, matched, windowed, model, pk, DEFAULT_FOCUS)
    st = st.set_index("stage")
    # Prefill ran once and every launch was captured: measured FLOPs are the plain sum of the cells.
    pre_flops = _all_flops(D / "prefill.raw.csv")
    assert st.loc["prefill", "flops_measured"] == pytest.approx(pre_flops, rel=1e-9)
    busy = (
        sum(
            float(r["Total Time (ns)"])
            for r in csv.DictReader((D / "stats" / "nvtx_kern_sum.csv").open())
            if r["NVTX Range"] == "nsightflow:prefill"
        )
        * 1e-9
    )
    # HFU: the FLOPs the GPU executed; MFU: the model's FLOPs (causal-adjusted); both on timeline time.
    assert st.loc["prefill", "hfu_busy"] == pytest.approx(pre_flops / (busy * pk.compute), rel=1e-9)
    assert st.loc["prefill", "mfu_busy"] == pytest.approx(
        model["prefill"].flops_causal_adjusted / (busy * pk.compute), rel=1e-9
    )
    # Decode: every step launches the same classes, so scaling step 3 to all launches is 8 x step 3.
    dec_flops = _all_flops(D / "decode.step3.raw.csv")
    assert st.loc["decode", "flops_measured"] == pytest.approx(8 * dec_flops, rel=1e-9)
    assert st.loc["decode", "coverage"] == 1.0 and st.loc["prefill", "coverage"] == 1.0
    assert st.loc["decode", "classes"] == 22 and st.loc["prefill", "classes"] == 27
    # A class's counters come from its own launches: one nvjet GEMM runs with two grids in decode (4x12, 4x22).
    nvjet = classes[(classes["stage"] == "decode") & (classes["kernel"] == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT")]
    assert len(nvjet) == 2 and nvjet["flops_per_launch"].nunique() == 2
    # Decode's 4-token steps run on padded tensor-core tiles: executed FLOPs far above the model's, explained.
    ratio = 8 * dec_flops / model["decode"].flops
    assert st.loc["decode", "executed_over_model"] == pytest.approx(ratio, rel=1e-9) and ratio > 3
    assert any(
        n.text.startswith("decode: the GPU executed 3.56x the model's FLOPs")
        for n in diagnostics.stage_notes(st.reset_index())
    )
    # Prefill measured within 5% of the analytic count once causal attention is accounted for.
    assert abs(st.loc["prefill", "flops_measured"] / st.loc["prefill", "flops_analytic_causal"] - 1) < 0.05
    # Wall time far above GPU busy time (CPU-bound dispatch at this size) is flagged.
    assert st.loc["decode", "diverges"] and st.loc["decode", "mfu_wall"] < st.loc["decode", "mfu_busy"]
    # The kernel table sums its classes; top-N marks the report's focus only.
    assert kernels.groupby("stage")["instances"].sum().to_dict() == {"decode": 1088, "prefill": 128}
    assert kernels["selected"].any() and not kernels["selected"].all()


def test_a_missing_cell_is_never_a_zero():
    raw, _ = ncu_csv.parse_raw_csv(D / "prefill.raw.csv")
    raw.loc[3, "sm__ops_path_tensor_src_bf16_dst_fp32.sum"] = np.nan  # as an 'n/a' cell parses
    res = ncu_csv.result_metrics(raw)
    assert np.isnan(res.loc[3, "flops"]) and np.isfinite(res.loc[4, "flops"])
    tl, matched = _matched(D, ["prefill", "decode.step3"], [3])
    bad = matched.copy()
    bad.loc[3, "flops"] = np.nan
    values = metrics.launch_values(tl.launches[tl.launches["pass_"] == "ranged"], bad, {("prefill", 0), ("decode", 3)})
    classes = metrics.class_summary(values)
    hit = classes[(classes["stage"] == "prefill") & (classes["class_key"] == bad.loc[3, "class_key"])]
    assert hit["flops"].isna().all()  # the class has no number, not a smaller one
    st = metrics.stage_measured(values).set_index("stage")
    assert st.loc["prefill", "covered_ns"] < st.loc["prefill", "busy_ns"]  # and coverage says so


def test_a_call_profiled_in_no_step_is_named_an_estimate_with_its_share_of_the_stage():
    """An operator call whose shapes no profiled launch had (a serving iteration's batch, a growing cache) takes
    the counters of the launch at its position in the profiled steps of its launch sequence: each such launch is
    marked, and the stage says how much of its GPU time they are. The default decoder's capture on an H100."""
    from nsightflow.analysis.steps import step_measured, stood_in_shares

    run = DATA / "h100_probe"
    tl = attribution.read_timeline(run / "timeline.sqlite", "nsightflow")
    ran = plan.CapturePlan.read(run / "plan.json")
    raw, _ = ncu_csv.parse_raw_csv(run / "capture.raw.csv")
    matched = matching.match_to_plan(ncu_csv.result_metrics(raw), plan.expected_frame(ran), "capture")
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    chosen = plan.chosen_pairs(ran)
    profiled = set(zip(matched["stage"], matched["class_key"], strict=True))

    def standing(r):  # a call's launch outside the chosen steps whose class no profiled launch has: by sets
        keys = zip(r["stage"], r["step"], r["class_key"], strict=True)
        out = [(st, int(n)) not in chosen and (st, k) not in profiled for st, n, k in keys]
        return np.array(out) & attribution.call_classes(r)

    def share(r, mask):
        return {st: float(r["duration_ns"][mask & (r["stage"] == st).to_numpy()].sum()) / float(
            r["duration_ns"][(r["stage"] == st).to_numpy()].sum()) for st in r["stage"].unique()}  # fmt: skip

    values = metrics.launch_values(ranged, matched, chosen)
    want = standing(ranged)
    assert values["stood_in"].to_numpy().tolist() == want.tolist()
    assert stood_in_shares(step_measured(values)) == pytest.approx(share(ranged, want))
    # One unprofiled decode step's calls given other shapes: they now stand on the profiled steps' launches too.
    other = ranged.copy()
    steps = zip(other["stage"], other["step"], strict=True)
    step = min(n for st, n in steps if st == "decode" and (st, n) not in chosen)
    one = (other["stage"] == "decode").to_numpy() & (other["step"] == step).to_numpy() & attribution.call_classes(other)
    other.loc[one, "class_key"] = other.loc[one, "class_key"].astype(str) + " (other shapes)"
    values = metrics.launch_values(other, matched, chosen)
    more = standing(other)
    assert (more == (want | one)).all()
    assert values["stood_in"].to_numpy().tolist() == more.tolist() and more.sum() > want.sum()
    shares = stood_in_shares(step_measured(values))
    assert shares == pytest.approx(share(other, more)) and 0 < shares["decode"] < 1
    assert values.loc[one, "flops_tensor"].notna().all()  # another launch's numbers, named an estimate, never NaN


def test_range_exports_are_not_joined_per_kernel(tmp_path):
    # A range-replay export has no Grid/Block columns (one row per range): derived here from the real
    # prefill export by dropping them, since aggregation must refuse to join it per kernel.
    rows = list(csv.reader((D / "prefill.raw.csv").open()))
    keep = [i for i, h in enumerate(rows[0]) if h not in ("Grid Size", "Block Size")]
    export = tmp_path / "prefill.raw.csv"
    with export.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows([[r[i] for i in keep] for r in rows])
    raw, _ = ncu_csv.parse_raw_csv(export)
    with pytest.raises(ValueError, match="one result per range"):
        aggregate.kernel_results(raw, export)


def test_filtered_run_counts_only_the_captured_classes():
    # The older default run on the H200: top kernels only, in decode steps 0, 3 and 7.
    F = DATA / "h200_tinyllm_filtered"
    caps = ["prefill", "decode.step0", "decode.step3", "decode.step7"]
    tl = attribution.read_timeline(F / "timeline.sqlite", "nsightflow")
    parts = []
    for cap in caps:
        raw, _ = ncu_csv.parse_raw_csv(F / f"{cap}.raw.csv")
        parts.append(matching.search_timeline(ncu_csv.result_metrics(raw), tl.launches, "nsightflow", cap))
    matched = pd.concat(parts, ignore_index=True)
    raw, _ = ncu_csv.parse_raw_csv(F / "prefill.raw.csv")
    pk = peaks.peaks(ncu_csv.result_metrics(raw), "NVIDIA H200", "bf16")
    model = aggregate.load_analytic(F / "analytic_flops.json")
    _, _, st, _ = aggregate.tables(
        tl, matched, {("prefill", 0), ("decode", 0), ("decode", 3), ("decode", 7)}, model, pk, DEFAULT_FOCUS
    )
    st = st.set_index("stage")
    selected = list(csv.DictReader((F / "selected_kernels.csv").open()))
    rows = list(csv.DictReader((F / "stats" / "nvtx_kern_sum.csv").open()))
    for stage in ("prefill", "decode"):
        chosen = {r["kernel"] for r in selected if r["stage"] == stage}
        mine = [r for r in rows if r["NVTX Range"] == f"nsightflow:{stage}"]
        covered = sum(float(r["Total Time (ns)"]) for r in mine if r["Kernel Name"] in chosen)
        assert st.loc[stage, "coverage"] == pytest.approx(covered / sum(float(r["Total Time (ns)"]) for r in mine))
    assert st.loc["prefill", "flops_measured"] == pytest.approx(_all_flops(F / "prefill.raw.csv"), rel=1e-9)
    # Decode: three sampled steps, each launching the same classes; scaled to 8 steps.
    dec = sum(_all_flops(F / f"{c}.raw.csv") for c in caps[1:])
    assert st.loc["decode", "flops_measured"] == pytest.approx(dec * 8 / 3, rel=1e-9)


def test_wall_times_are_the_timed_pass_and_must_describe_the_same_steps():
    stages = pd.DataFrame({"stage": ["prefill", "decode"], "range_instances": [1, 3], "wall_ns": [5e6, 9e6]})
    got = metrics.with_program_wall(stages, {"prefill": [0.002], "decode": [0.001, 0.001, 0.002]}, "m.json")
    assert got["wall_ns"].tolist() == pytest.approx([2e6, 4e6]) and got["wall_profiled_ns"].tolist() == [5e6, 9e6]
    assert metrics.with_program_wall(stages, None, "m.json")["wall_ns"].tolist() == [5e6, 9e6]
    with pytest.raises(ValueError, match=r"m.json: the timed pass ran steps \{'prefill': 1, 'decode': 2\}"):
        metrics.with_program_wall(stages, {"prefill": [0.002], "decode": [0.001, 0.001]}, "m.json")
    with pytest.raises(ValueError, match="are not durations"):
        metrics.with_program_wall(stages, {"prefill": [-1.0], "decode": [0.001, 0.001, 0.002]}, "m.json")


def test_mfu_against_the_datasheet_beside_the_measured_peak():
    """The recorded H200 run: MFU on the peak ncu's clocks give, and on the datasheet's dense bf16 989.4 TFLOP/s that
    published MFU figures divide by; the headline shows both and says which is which."""
    from nsightflow.report.headline import headline_html

    agg = aggregate_recorded(DATA / "h200_v2" / "default")
    pk, st = agg.peaks, agg.stages
    assert pk.datasheet_compute == 989.4e12 and pk.compute != pk.datasheet_compute
    model = st["flops_analytic_causal"]
    busy_s, wall_s = st["gpu_busy_ms"] * 1e-3, st["wall_ms"] * 1e-3
    assert np.allclose(st["mfu_busy_datasheet"], model / busy_s / 989.4e12)
    assert np.allclose(st["mfu_wall_datasheet"], model / wall_s / 989.4e12)
    assert np.allclose(st["mfu_busy"], model / busy_s / pk.compute)
    page = headline_html(st, agg.kernels, pk)
    assert "MFU vs datasheet, wall / busy" in page and "989 TFLOP/s, the dense bf16 peak" in page
