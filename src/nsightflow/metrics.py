"""From ncu counters and the nsys timeline to FLOPs, bytes, MFU and bandwidth utilisation.

Rules this module keeps:
- counts (FLOPs, bytes) come from ncu and do not depend on clocks; times come from the nsys
  timeline, because ncu locks clocks and flushes caches by default;
- sampled launches are scaled to all launches with the timeline's instance counts, and the
  share of the stage's GPU time that the captured kernels cover is stated beside every total;
- peaks come from the capture's own ``peak_sustained`` metrics times the clock measured in the
  same result where ncu has them (dense tensor rate: the aggregate bf16 counter's peak is the
  sparse rate), else from a datasheet table keyed by device name; each peak names its source.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsightflow.ncu import BYTE_METRICS, PEAK_METRICS, SASS_FLOP_METRICS, TENSOR_FLOP_METRICS, TIME_METRICS

# Datasheet peaks (dense, no sparsity), FLOP/s and bytes/s, matched by substring of the device name.
DATASHEET = {
    "H200": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp8": 1978.9e12, "fp32": 66.9e12,
             "fp64": 66.9e12, "dram": 4.8e12, "source": "NVIDIA H200 datasheet (SXM)"},
    "H100 80GB HBM3": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp8": 1978.9e12,
                       "fp32": 66.9e12, "fp64": 66.9e12, "dram": 3.35e12, "source": "NVIDIA H100 datasheet (SXM)"},
    "H100 PCIe": {"bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378e12, "fp8": 1513e12, "fp32": 51.2e12,
                  "fp64": 51.2e12, "dram": 2.0e12, "source": "NVIDIA H100 datasheet (PCIe)"},
    "A100-SXM4-80GB": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12, "fp64": 19.5e12,
                       "dram": 2.039e12, "source": "NVIDIA A100 datasheet (SXM 80GB)"},
    "A100-SXM4-40GB": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12, "fp64": 19.5e12,
                       "dram": 1.555e12, "source": "NVIDIA A100 datasheet (SXM 40GB)"},
    "L4": {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp8": 242e12, "fp32": 30.3e12, "dram": 0.3e12,
           "source": "NVIDIA L4 datasheet"},
}

# Which FLOP precision a workload dtype's matrix work runs at.
DTYPE_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}
# Which workload dtype a tensor-pipe precision stands for (analysis of captures without a config).
DTYPE_BY_TENSOR_PRECISION = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp64_tensor": "float64"}


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A metric column as floats, zeros where the metric was not collected or had no data."""
    if name not in df.columns:
        return pd.Series(0.0, index=df.index)
    return pd.to_numeric(df[name], errors="coerce").fillna(0.0)


def result_metrics(raw: pd.DataFrame) -> pd.DataFrame:
    """Per ncu result: duration, FLOPs by precision (FMA = 2), bytes per memory level, clocks."""
    out = pd.DataFrame(index=raw.index)
    out["ncu_id"] = raw["ID"]
    out["ncu_kernel"] = raw["Kernel Name"]
    out["grid"] = raw.get("Grid Size")
    out["block"] = raw.get("Block Size")
    out["nvtx_range"] = raw.get("nvtx_range")
    out["nvtx_payload"] = raw.get("nvtx_payload")
    for key, metric in TIME_METRICS.items():
        out[key] = _col(raw, metric)
    for prec, metric in TENSOR_FLOP_METRICS.items():
        out[f"flops_tensor_{prec}"] = _col(raw, metric)
    for prec, pairs in SASS_FLOP_METRICS.items():
        out[f"flops_{prec}"] = sum(_col(raw, m) * k for m, k in pairs)
    flop_cols = [c for c in out.columns if c.startswith("flops_")]
    out["flops"] = out[flop_cols].sum(axis=1)
    out["dram_bytes"] = _col(raw, BYTE_METRICS["dram_read"]) + _col(raw, BYTE_METRICS["dram_write"])
    out["l2_bytes"] = _col(raw, BYTE_METRICS["l2"])
    out["l1_bytes"] = _col(raw, BYTE_METRICS["l1"])
    for key, metric in PEAK_METRICS.items():
        out[key] = _col(raw, metric)
    return out


def match_to_timeline(results: pd.DataFrame, expected: list[dict], capture_id: str) -> pd.DataFrame:
    """Attach the timeline's full kernel name and step to each ncu result, by launch order.

    ncu prints shortened names, so names cannot be joined directly; the k-th profiled launch
    is the k-th expected launch of the plan, and grid and block sizes must agree.
    """
    if len(results) != len(expected):
        raise ValueError(
            f"capture {capture_id}: ncu profiled {len(results)} launches, the timeline predicts {len(expected)}; "
            "the program's launch sequence changed between the nsys and ncu runs (non-deterministic dispatch?)")
    res = results.sort_values("ncu_id").reset_index(drop=True)
    exp = pd.DataFrame(expected).reset_index(drop=True)
    bad = [i for i in range(len(res))
           if str(res.loc[i, "grid"]) != str(exp.loc[i, "grid"]) or str(res.loc[i, "block"]) != str(exp.loc[i, "block"])]
    if bad:
        i = bad[0]
        raise ValueError(
            f"capture {capture_id}: launch {i} differs between ncu ({res.loc[i, 'ncu_kernel']} grid {res.loc[i, 'grid']} "
            f"block {res.loc[i, 'block']}) and the timeline ({exp.loc[i, 'kernel']} grid {exp.loc[i, 'grid']} "
            f"block {exp.loc[i, 'block']}); {len(bad)} launches differ")
    res["kernel"] = exp["kernel"]
    res["step"] = exp["step"]
    res["capture_id"] = capture_id
    return res


def peaks(results: pd.DataFrame, device_name: str | None, dtype: str) -> dict:
    """Compute and memory peaks for the workload's dtype, each with its source."""
    precision = DTYPE_PRECISION.get(dtype, dtype)
    sm_hz = results["sm_hz"].replace(0, np.nan).median() if len(results) else np.nan
    dram_hz = results["dram_hz"].replace(0, np.nan).median() if len(results) else np.nan
    sheet_key = next((k for k in DATASHEET if device_name and k in device_name), None)
    sheet = DATASHEET.get(sheet_key, {})
    out: dict = {"precision": precision, "device_name": device_name, "sm_hz": sm_hz, "dram_hz": dram_hz}

    per_cycle = {"bf16": results["bf16_dense_per_cycle"].max() if len(results) else 0,
                 "fp32": 2 * results["ffma_per_cycle"].max() if len(results) else 0}
    if per_cycle.get(precision, 0) > 0 and sm_hz > 0:
        metric = PEAK_METRICS["bf16_dense_per_cycle" if precision == "bf16" else "ffma_per_cycle"]
        factor = "" if precision == "bf16" else "2 × "
        out["compute"] = per_cycle[precision] * sm_hz
        out["compute_source"] = f"ncu: {factor}{metric} × sm__cycles_elapsed.avg.per_second ({sm_hz / 1e9:.3f} GHz)"
    elif precision in sheet:
        out["compute"] = sheet[precision]
        out["compute_source"] = sheet["source"]
    else:
        out["compute"] = np.nan
        out["compute_source"] = f"unknown: no ncu peak for {precision} and no datasheet entry for {device_name!r}"
    dram_pc = results["dram_bytes_per_cycle"].max() if len(results) else 0
    if dram_pc > 0 and dram_hz > 0:
        out["dram"] = dram_pc * dram_hz
        out["dram_source"] = (f"ncu: {PEAK_METRICS['dram_bytes_per_cycle']} × dram__cycles_elapsed.avg.per_second "
                              f"({dram_hz / 1e9:.3f} GHz)")
    elif "dram" in sheet:
        out["dram"] = sheet["dram"]
        out["dram_source"] = sheet["source"]
    else:
        out["dram"] = np.nan
        out["dram_source"] = f"unknown: no ncu peak and no datasheet entry for {device_name!r}"
    if sheet:
        out["datasheet_compute"] = sheet.get(precision, np.nan)
        out["datasheet_dram"] = sheet.get("dram", np.nan)
        out["datasheet_source"] = sheet["source"]
    return out


def ceiling_peaks(ceiling: dict, dtype: str) -> dict:
    """Peaks from the measured ceilings (torch backend: the only denominators a CPU has), datasheet beside."""
    precision = DTYPE_PRECISION.get(dtype, dtype)
    name = ceiling.get("device_name")
    out = {"precision": precision, "device_name": name,
           "compute": ceiling["matmul_flops_per_s"],
           "compute_source": f"measured on {name}: {ceiling['method']['matmul']}",
           "dram": ceiling["copy_bytes_per_s"], "dram_source": f"measured on {name}: {ceiling['method']['copy']}"}
    if ceiling.get("dtype") != dtype:
        out["compute_source"] += f" (ceiling dtype {ceiling.get('dtype')}, workload {dtype})"
    sheet_key = next((k for k in DATASHEET if name and k in name), None)
    if sheet_key:
        sheet = DATASHEET[sheet_key]
        out.update(datasheet_compute=sheet.get(precision, np.nan), datasheet_dram=sheet.get("dram", np.nan),
                   datasheet_source=sheet["source"])
    return out


def with_ceiling(pk: dict, ceiling: dict) -> dict:
    """Add the measured ceilings to ncu/datasheet peaks, as second denominators."""
    return {**pk, "ceiling_compute": ceiling["matmul_flops_per_s"], "ceiling_dram": ceiling["copy_bytes_per_s"],
            "ceiling_source": f"measured on {ceiling.get('device_name')}: {ceiling['method']['matmul']}; "
                              f"{ceiling['method']['copy']}"}


def kernel_summary(matched: pd.DataFrame, selected: pd.DataFrame, pk: dict) -> pd.DataFrame:
    """Per (stage, kernel): timeline time and instances, per-launch counts from ncu, intensity, share of peak."""
    per_launch = matched.groupby(["stage", "kernel"], as_index=False).agg(
        sampled_launches=("ncu_id", "size"), flops_per_launch=("flops", "mean"),
        dram_bytes_per_launch=("dram_bytes", "mean"), l2_bytes_per_launch=("l2_bytes", "mean"),
        l1_bytes_per_launch=("l1_bytes", "mean"), ncu_duration_ns=("duration_ns", "mean"))
    out = selected.merge(per_launch, on=["stage", "kernel"], how="left")
    out["avg_ns"] = out["total_ns"] / out["instances"]
    out["flops"] = out["flops_per_launch"] * out["instances"]
    out["dram_bytes"] = out["dram_bytes_per_launch"] * out["instances"]
    out["l2_bytes"] = out["l2_bytes_per_launch"] * out["instances"]
    out["l1_bytes"] = out["l1_bytes_per_launch"] * out["instances"]
    out["arithmetic_intensity"] = out["flops_per_launch"] / out["dram_bytes_per_launch"].replace(0, np.nan)
    out["achieved_flops_per_s"] = out["flops_per_launch"] / (out["avg_ns"] * 1e-9)
    out["achieved_dram_bytes_per_s"] = out["dram_bytes_per_launch"] / (out["avg_ns"] * 1e-9)
    out["compute_utilisation"] = out["achieved_flops_per_s"] / pk["compute"]
    out["dram_utilisation"] = out["achieved_dram_bytes_per_s"] / pk["dram"]
    return out


def _util(amount: float, seconds: float, peak: float) -> float:
    """amount / (seconds × peak): a utilisation, NaN where any part is missing or zero."""
    if not (seconds and peak) or not np.isfinite(amount) or not np.isfinite(peak):
        return np.nan
    return amount / (seconds * peak)


def stage_summary(kernels: pd.DataFrame, ksum: pd.DataFrame, stages: pd.DataFrame, analytic: dict,
                  pk: dict, divergence: float = 0.5) -> pd.DataFrame:
    """Per stage: wall and GPU busy time (timeline), FLOPs and bytes (ncu, scaled), utilisation on each time.

    MFU divides the model's FLOPs (FlopCounterMode, causal-adjusted) by time × peak; HFU divides
    the FLOPs the hardware executed (ncu counters), which include tile padding and recomputation.
    Both use measured times; their ratio (``executed_over_model``) shows wasted tensor work.

    ``kernels`` is the timeline's full per-stage kernel table (for busy time), ``ksum`` the
    captured kernels (kernel_summary), ``analytic`` the harness' FlopCounterMode counts.
    """
    rows = []
    for _, st in stages.iterrows():
        name = st["stage"]
        allk = kernels[kernels["stage"] == name]
        cap = ksum[(ksum["stage"] == name) & ksum.get("sampled_launches", pd.Series(np.nan, index=ksum.index)).notna()]
        busy_ns = float(allk["total_ns"].sum())
        covered_ns = float(cap["total_ns"].sum())
        flops = float(cap["flops"].sum()) if len(cap) else np.nan
        dram = float(cap["dram_bytes"].sum()) if len(cap) else np.nan
        an = analytic.get(name, {})
        model = an.get("flops_causal_adjusted", an.get("flops", np.nan))
        wall_s, busy_s = st["wall_ns"] * 1e-9, busy_ns * 1e-9
        row = {
            "stage": name, "range_instances": int(st["range_instances"]),
            "wall_ms": st["wall_ns"] / 1e6, "gpu_busy_ms": busy_ns / 1e6,
            "kernels": int(len(allk)), "captured_kernels": int(len(cap)),
            "coverage": covered_ns / busy_ns if busy_ns else np.nan,
            "flops_measured": flops, "flops_analytic": an.get("flops", np.nan),
            "flops_analytic_causal": an.get("flops_causal_adjusted", np.nan),
            "executed_over_model": flops / model if model else np.nan,
            "dram_bytes_measured": dram,
            "mfu_wall": _util(model, wall_s, pk["compute"]), "mfu_busy": _util(model, busy_s, pk["compute"]),
            "hfu_wall": _util(flops, wall_s, pk["compute"]), "hfu_busy": _util(flops, busy_s, pk["compute"]),
            "dram_bw_util_busy": _util(dram, busy_s, pk["dram"]),
            "dram_bw_util_wall": _util(dram, wall_s, pk["dram"]),
        }
        row["bytes_analytic"] = an.get("bytes_lower_bound", np.nan)
        row["bw_util_busy_model"] = _util(row["bytes_analytic"], busy_s, pk["dram"])
        if "ceiling_compute" in pk:
            row["mfu_busy_ceiling"] = _util(model, busy_s, pk["ceiling_compute"])
            row["dram_bw_util_busy_ceiling"] = _util(dram, busy_s, pk["ceiling_dram"])
        if "sampled_launches" not in ksum or ksum["sampled_launches"].isna().all():
            row["coverage"] = np.nan  # no hardware counters on this path: nothing is "captured"
        row["busy_over_wall"] = busy_ns / st["wall_ns"] if st["wall_ns"] else np.nan
        row["diverges"] = bool(row["busy_over_wall"] < divergence)
        rows.append(row)
    return pd.DataFrame(rows)
