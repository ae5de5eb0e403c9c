"""The denominators of every utilisation: compute and bandwidth peaks, each with its source. From the capture's
own ``peak_sustained`` metrics times the clock measured in the same result where ncu has them (dense tensor rate: the
aggregate bf16 counter's peak is the sparse rate), else measured matmul and copy ceilings, else a datasheet table
keyed by device name; no peak where the precision of the work is unknown."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from nsightflow.ncu_metrics import PEAK_METRICS
from nsightflow.precisions import UNKNOWN
from nsightflow.records import Ceilings, Peaks

# Datasheet peaks (dense, no sparsity), FLOP/s and bytes/s, matched by substring of the device name.
DATASHEET = {
    "H200": {
        "bf16": 989.4e12,
        "fp16": 989.4e12,
        "tf32": 494.7e12,
        "fp8": 1978.9e12,
        "fp32": 66.9e12,
        "fp64_tensor": 66.9e12,
        "dram": 4.8e12,
        "source": "NVIDIA H200 datasheet (SXM)",
    },
    "H100 80GB HBM3": {
        "bf16": 989.4e12,
        "fp16": 989.4e12,
        "tf32": 494.7e12,
        "fp8": 1978.9e12,
        "fp32": 66.9e12,
        "fp64_tensor": 66.9e12,
        "dram": 3.35e12,
        "source": "NVIDIA H100 datasheet (SXM)",
    },
    "H100 PCIe": {
        "bf16": 756.5e12,
        "fp16": 756.5e12,
        "tf32": 378e12,
        "fp8": 1513e12,
        "fp32": 51.2e12,
        "fp64_tensor": 51.2e12,
        "dram": 2.0e12,
        "source": "NVIDIA H100 datasheet (PCIe)",
    },
    "A100-SXM4-80GB": {
        "bf16": 312e12,
        "fp16": 312e12,
        "tf32": 156e12,
        "fp32": 19.5e12,
        "fp64_tensor": 19.5e12,
        "dram": 2.039e12,
        "source": "NVIDIA A100 datasheet (SXM 80GB)",
    },
    "A100-SXM4-40GB": {
        "bf16": 312e12,
        "fp16": 312e12,
        "tf32": 156e12,
        "fp32": 19.5e12,
        "fp64_tensor": 19.5e12,
        "dram": 1.555e12,
        "source": "NVIDIA A100 datasheet (SXM 40GB)",
    },
    "L4": {
        "bf16": 121e12,
        "fp16": 121e12,
        "tf32": 60e12,
        "fp8": 242e12,
        "fp32": 30.3e12,
        "dram": 0.3e12,
        "source": "NVIDIA L4 datasheet",
    },
}


def peaks(results: pd.DataFrame, device_name: str | None, precision: str) -> Peaks:
    """Compute peak in ``precision`` (nsightflow.precisions.matmul_precision) and memory peak, each with its
    source."""
    sm_hz = results["sm_hz"].replace(0, np.nan).median() if len(results) else np.nan
    dram_hz = results["dram_hz"].replace(0, np.nan).median() if len(results) else np.nan
    sheet_key = next((k for k in DATASHEET if device_name and k in device_name), None)
    sheet = DATASHEET.get(sheet_key, {}) if sheet_key else {}
    out: dict[str, Any] = {"precision": precision, "device_name": device_name, "sm_hz": sm_hz, "dram_hz": dram_hz}

    per_cycle = {
        "bf16": results["bf16_dense_per_cycle"].max() if len(results) else 0,
        "fp32": 2 * results["ffma_per_cycle"].max() if len(results) else 0,
    }
    if per_cycle.get(precision, 0) > 0 and sm_hz > 0:
        metric = PEAK_METRICS["bf16_dense_per_cycle" if precision == "bf16" else "ffma_per_cycle"]
        factor = "" if precision == "bf16" else "2 × "
        out["compute"] = per_cycle[precision] * sm_hz
        out["compute_source"] = f"ncu: {factor}{metric} × sm__cycles_elapsed.avg.per_second ({sm_hz / 1e9:.3f} GHz)"
    elif precision in sheet:
        out["compute"] = sheet[precision]
        out["compute_source"] = sheet["source"]
    elif precision == UNKNOWN:
        out["compute"] = np.nan
        out["compute_source"] = "unknown: nothing tells which precision the GEMMs ran in (see Diagnostics)"
    else:
        out["compute"] = np.nan
        out["compute_source"] = f"unknown: no ncu peak for {precision} and no datasheet entry for {device_name!r}"
    dram_pc = results["dram_bytes_per_cycle"].max() if len(results) else 0
    if dram_pc > 0 and dram_hz > 0:
        out["dram"] = dram_pc * dram_hz
        out["dram_source"] = (
            f"ncu: {PEAK_METRICS['dram_bytes_per_cycle']} × dram__cycles_elapsed.avg.per_second "
            f"({dram_hz / 1e9:.3f} GHz)"
        )
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
    return Peaks(**out)


def ceiling_peaks(ceiling: Ceilings, precision: str) -> Peaks:
    """Peaks from the measured ceilings (torch backend: the only denominators a CPU has), datasheet beside."""
    name = ceiling.device_name
    if not ceiling.measured:
        why = f"unknown: the ceiling was {ceiling.error or 'not measured'}"
        return Peaks(precision, name, np.nan, why, np.nan, why)
    out: dict[str, Any] = {
        "precision": precision,
        "device_name": name,
        "compute": ceiling.matmul_flops_per_s if precision != UNKNOWN else np.nan,
        "compute_source": f"measured on {name}: {ceiling.method.get('matmul', '')}"
        if precision != UNKNOWN
        else "unknown: nothing tells which precision the GEMMs ran in (see Diagnostics)",
        "dram": ceiling.copy_bytes_per_s,
        "dram_source": f"measured on {name}: {ceiling.method.get('copy', '')}",
    }
    if ceiling.precision != precision and precision != UNKNOWN:
        out["compute_source"] += f" (ceiling in {ceiling.precision}, workload in {precision})"
    sheet_key = next((k for k in DATASHEET if name and k in name), None)
    if sheet_key:
        sheet = DATASHEET[sheet_key]
        out.update(
            datasheet_compute=sheet.get(precision, np.nan),
            datasheet_dram=sheet.get("dram", np.nan),
            datasheet_source=sheet["source"],
        )
    return Peaks(**out)


def with_ceiling(pk: Peaks, ceiling: Ceilings) -> Peaks:
    """Add the measured ceilings to ncu/datasheet peaks, as second denominators (no compute ceiling where the
    precision of the work is unknown: the ceiling multiplied in float32 only as a reference)."""
    return replace(
        pk,
        ceiling_compute=ceiling.matmul_flops_per_s if pk.precision != UNKNOWN else np.nan,
        ceiling_dram=ceiling.copy_bytes_per_s,
        ceiling_source=f"measured on {ceiling.device_name}: {ceiling.method.get('matmul', '')}; "
        f"{ceiling.method.get('copy', '')}",
    )
