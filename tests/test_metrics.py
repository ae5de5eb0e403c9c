"""FLOPs, bytes, peaks and stage MFU from real captures, against sums taken straight from the CSVs."""

import csv
import json
import statistics

import pytest

from conftest import DATA
from nsightflow import aggregate, metrics, ncu

D = DATA / "h200_tinyllm"


def _cells(path, metric):
    rows = list(csv.reader(path.open()))
    i = rows[0].index(metric)
    return [float(r[i].replace(",", "")) for r in rows[2:]]


SASS = {"fadd": 1, "fmul": 1, "ffma": 2, "dadd": 1, "dmul": 1, "dfma": 2, "hadd": 2, "hmul": 2, "hfma": 4}


def _all_flops(path):
    """Tensor-pipe FLOPs plus SASS FLOPs (FMA = 2, half2 = 2 lanes), summed from the CSV cells."""
    tensor = sum(sum(_cells(path, f"sm__ops_path_tensor_src_{p}.sum"))
                 for p in ("bf16_dst_fp32", "fp16", "tf32_dst_fp32", "fp8", "fp64"))
    return tensor + sum(k * sum(_cells(path, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"))
                        for op, k in SASS.items())


def test_result_flops_follow_the_counting_rules():
    raw, _ = ncu.parse_raw_csv(D / "prefill.raw.csv")
    res = metrics.result_metrics(raw)
    p = D / "prefill.raw.csv"
    tensor = sum(_cells(p, "sm__ops_path_tensor_src_bf16_dst_fp32.sum"))
    fp32 = (sum(_cells(p, "sm__sass_thread_inst_executed_op_fadd_pred_on.sum"))
            + sum(_cells(p, "sm__sass_thread_inst_executed_op_fmul_pred_on.sum"))
            + 2 * sum(_cells(p, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum")))
    assert res["flops_tensor_bf16"].sum() == tensor
    assert res["flops_fp32"].sum() == fp32
    assert res["flops"].sum() == pytest.approx(_all_flops(p), rel=1e-12)
    assert res["dram_bytes"].sum() == sum(_cells(p, "dram__bytes_read.sum")) + sum(_cells(p, "dram__bytes_write.sum"))


def test_peaks_come_from_the_capture_with_their_source():
    raw, _ = ncu.parse_raw_csv(D / "prefill.raw.csv")
    pk = metrics.peaks(metrics.result_metrics(raw), "NVIDIA H200", "bfloat16")
    clock = statistics.median(_cells(D / "prefill.raw.csv", "sm__cycles_elapsed.avg.per_second"))
    assert pk["compute"] == pytest.approx(540672 * clock)  # dense hgmma rate, not the sparse aggregate
    assert "sparsity_off" in pk["compute_source"]
    dram_clock = statistics.median(_cells(D / "prefill.raw.csv", "dram__cycles_elapsed.avg.per_second"))
    assert pk["dram"] == pytest.approx(1504 * dram_clock)
    assert pk["datasheet_compute"] == 989.4e12
    fallback = metrics.peaks(metrics.result_metrics(raw).assign(bf16_dense_per_cycle=0.0), "NVIDIA H200", "bfloat16")
    assert fallback["compute"] == 989.4e12 and "datasheet" in fallback["compute_source"]


def test_match_to_timeline_checks_order_grid_and_block():
    raw, _ = ncu.parse_raw_csv(D / "prefill.raw.csv")
    plan = json.loads((D / "plans" / "prefill.json").read_text())
    res = metrics.match_to_timeline(metrics.result_metrics(raw), plan["expected"], "prefill")
    assert len(res) == 128 and res["kernel"].tolist() == [e["kernel"] for e in plan["expected"]]
    broken = [dict(e) for e in plan["expected"]]
    broken[5]["grid"] = "(1, 1, 1)"
    with pytest.raises(ValueError, match="launch 5 differs"):
        metrics.match_to_timeline(metrics.result_metrics(raw), broken, "prefill")
    with pytest.raises(ValueError, match="predicts 127"):
        metrics.match_to_timeline(metrics.result_metrics(raw), plan["expected"][:-1], "prefill")


def test_stage_numbers_scale_samples_with_timeline_counts():
    agg = aggregate.aggregate_run(D / "stats", D / "timeline.sqlite", D / "selected_kernels.csv",
                                  [D / "plans" / "decode.step3.json", D / "plans" / "prefill.json"],
                                  [D / "decode.step3.raw.csv", D / "prefill.raw.csv"],
                                  D / "analytic_flops.json", "bfloat16")
    st = agg["stages"].set_index("stage")
    pk = agg["peaks"]
    # Prefill ran once and every launch was captured: measured FLOPs are the plain sum.
    pre_flops = _all_flops(D / "prefill.raw.csv")
    assert st.loc["prefill", "flops_measured"] == pytest.approx(pre_flops, rel=1e-9)
    busy = sum(float(r["Total Time (ns)"]) for r in csv.DictReader((D / "stats" / "nvtx_kern_sum.csv").open())
               if r["NVTX Range"] == "nsightflow:prefill") * 1e-9
    model = json.loads((D / "analytic_flops.json").read_text())["stages"]
    # HFU: the FLOPs the GPU executed; MFU: the model's FLOPs (causal-adjusted); both on timeline time.
    assert st.loc["prefill", "hfu_busy"] == pytest.approx(pre_flops / (busy * pk["compute"]), rel=1e-9)
    assert st.loc["prefill", "mfu_busy"] == pytest.approx(
        model["prefill"]["flops_causal_adjusted"] / (busy * pk["compute"]), rel=1e-9)
    # Decode: every step launches the same kernels, so scaling step 3 to all launches is 8 x step 3.
    dec_flops = _all_flops(D / "decode.step3.raw.csv")
    assert st.loc["decode", "flops_measured"] == pytest.approx(8 * dec_flops, rel=1e-9)
    assert st.loc["decode", "coverage"] == 1.0 and st.loc["prefill", "coverage"] == 1.0
    # Decode's 4-token steps run on padded tensor-core tiles: executed FLOPs far above the model's, explained.
    ratio = 8 * dec_flops / model["decode"]["flops"]
    assert st.loc["decode", "executed_over_model"] == pytest.approx(ratio, rel=1e-9) and ratio > 3
    assert any(n.startswith("decode: the GPU executed 3.56x the model's FLOPs") for n in agg["notes"])
    # Prefill measured within 5% of FlopCounterMode once causal attention is accounted for.
    assert abs(st.loc["prefill", "flops_measured"] / st.loc["prefill", "flops_analytic_causal"] - 1) < 0.05
    # Wall time far above GPU busy time (CPU-bound dispatch at this size) is flagged.
    assert st.loc["decode", "diverges"] and st.loc["decode", "mfu_wall"] < st.loc["decode", "mfu_busy"]
    assert any("sampled from steps [3] of 8" in n for n in agg["notes"])


def test_range_replay_results_are_refused_with_the_fix(tmp_path):
    # A range-replay export has no Grid/Block columns (one row per range): derived here from the real
    # prefill export by dropping them, since aggregation must refuse it rather than guess a join.
    rows = list(csv.reader((D / "prefill.raw.csv").open()))
    keep = [i for i, h in enumerate(rows[0]) if h not in ("Grid Size", "Block Size")]
    export = tmp_path / "prefill.raw.csv"
    with export.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows([[r[i] for i in keep] for r in rows])
    with pytest.raises(ValueError, match="replay_mode"):
        aggregate.aggregate_run(D / "stats", D / "timeline.sqlite", D / "selected_kernels.csv",
                                [D / "plans" / "prefill.json"], [export], D / "analytic_flops.json", "bfloat16")


def test_filtered_run_counts_only_the_selected_kernels():
    # The default config's run on the H200: captures filtered to the selected kernels by mangled name.
    F = DATA / "h200_tinyllm_filtered"
    caps = ["decode.step0", "decode.step3", "decode.step7", "prefill"]
    agg = aggregate.aggregate_run(F / "stats", F / "timeline.sqlite", F / "selected_kernels.csv",
                                  [F / "plans" / f"{c}.json" for c in caps], [F / f"{c}.raw.csv" for c in caps],
                                  F / "analytic_flops.json", "bfloat16")
    st = agg["stages"].set_index("stage")
    selected = list(csv.DictReader((F / "selected_kernels.csv").open()))
    rows = list(csv.DictReader((F / "stats" / "nvtx_kern_sum.csv").open()))
    for stage in ("prefill", "decode"):
        chosen = {r["kernel"] for r in selected if r["stage"] == stage}
        mine = [r for r in rows if r["NVTX Range"] == f"nsightflow:{stage}"]
        covered = sum(float(r["Total Time (ns)"]) for r in mine if r["Kernel Name"] in chosen)
        assert st.loc[stage, "coverage"] == pytest.approx(covered / sum(float(r["Total Time (ns)"]) for r in mine))
        assert st.loc[stage, "captured_kernels"] == len(chosen)
    assert st.loc["prefill", "flops_measured"] == pytest.approx(_all_flops(F / "prefill.raw.csv"), rel=1e-9)
    # Decode: three sampled steps, each launching the same kernels; scaled to 8 steps.
    dec = sum(_all_flops(F / f"{c}.raw.csv") for c in caps[:3])
    assert st.loc["decode", "flops_measured"] == pytest.approx(dec * 8 / 3, rel=1e-9)
