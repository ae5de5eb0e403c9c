"""GPU tier: the whole workflow on the default config, on a host with a GPU, nsys and ncu.

Run with ``pytest -m gpu`` on the GPU test host; skipped elsewhere. Set
NSIGHTFLOW_KEEP_RESULTS=DIR to keep the run's results (for refreshing tests/data/).
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pandas as pd
import pytest

from conftest import copy_workflow, snakemake
from nsightflow import ncu

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("wf"))
    start = time.time()
    snakemake(work, "--cores", "1", "results/report.html")
    print(f"\nworkflow: command to report in {time.time() - start:.1f} s")
    keep = os.environ.get("NSIGHTFLOW_KEEP_RESULTS")
    if keep:
        shutil.copytree(work / "results", keep, dirs_exist_ok=True)
    return work / "results"


def test_every_capture_profiled_kernels(run_dir):
    exports = sorted((run_dir / "tinyllm" / "ncu").glob("*.raw.csv"))
    assert exports, "no ncu exports"
    for export in exports:
        df, _ = ncu.parse_raw_csv(export)
        plan = json.loads((run_dir / "tinyllm" / "plans" / export.name.replace(".raw.csv", ".json")).read_text())
        print(f"{export.name}: {len(df)} results, plan {plan['launch_count']}, kernel filter {len(plan['kernels'])} names")
        assert plan["kernels"], "the default config filters captures to the selected kernels"
        assert len(df) >= 1
        assert len(df) == plan["launch_count"]


def test_decode_samples_come_from_configured_steps(run_dir):
    for export in sorted((run_dir / "tinyllm" / "ncu").glob("decode.step*.raw.csv")):
        step = int(export.name.split(".step")[1].split(".")[0])
        df, _ = ncu.parse_raw_csv(export)
        assert set(df["nvtx_range"]) == {"decode"}
        assert set(df["nvtx_payload"]) == {step}, f"{export.name}: payloads {set(df['nvtx_payload'])}"


def test_prefill_flops_match_flop_counter(run_dir):
    stages = pd.read_csv(run_dir / "tinyllm" / "stages.csv").set_index("stage")
    pre = stages.loc["prefill"]
    rel = abs(pre["flops_measured"] - pre["flops_analytic_causal"]) / pre["flops_analytic_causal"]
    print(f"prefill FLOPs measured {pre['flops_measured']:.4g}, analytic causal-adjusted "
          f"{pre['flops_analytic_causal']:.4g}, FlopCounterMode {pre['flops_analytic']:.4g}: {rel:.2%} off")
    assert rel < 0.05
    for stage in ("prefill", "decode"):
        assert stages.loc[stage, "mfu_busy"] > 0 and stages.loc[stage, "mfu_wall"] > 0
        print(f"{stage}: wall {stages.loc[stage, 'wall_ms']:.3f} ms, busy {stages.loc[stage, 'gpu_busy_ms']:.3f} ms, "
              f"MFU wall {stages.loc[stage, 'mfu_wall']:.2%}, busy {stages.loc[stage, 'mfu_busy']:.2%}, "
              f"HFU busy {stages.loc[stage, 'hfu_busy']:.2%}, executed/model {stages.loc[stage, 'executed_over_model']:.2f}, "
              f"DRAM BW util busy {stages.loc[stage, 'dram_bw_util_busy']:.2%}, coverage {stages.loc[stage, 'coverage']:.1%}")


def test_report_names_each_stage(run_dir):
    html = (run_dir / "report.html").read_text()
    for stage in ("prefill", "decode"):
        assert f"<td>{stage}</td>" in html
    assert "data:image/png;base64," in html
