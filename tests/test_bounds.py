"""What bounds a stage (nsightflow.analysis.bounds), from the numbers of real runs: the default decoder recorded on
an H200 (launch/host-bound: the device busy 10% of decode's wall time), and stage tables of the GPU tier on an
H100 (a CUDA-graph decode that keeps the device busy with neither unit near its peak; a memory-bound optimizer)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import DATA, aggregate_recorded

from nsightflow.analysis import bounds
from nsightflow.records import Peaks
from nsightflow.report.headline import headline_html, headline_line, short_kernel

V3 = DATA / "h200_v3" / "default"
H100 = DATA / "h100_stages"


@pytest.fixture(scope="module")
def default_run():
    return aggregate_recorded(V3, manifest_json=V3 / "manifest.json")


def test_the_default_decoders_decode_is_launch_bound_and_the_page_says_why(default_run):
    stages = default_run.stages.set_index("stage")
    busy = stages.loc["decode", "gpu_busy_ms"] / stages.loc["decode", "wall_ms"]
    assert busy < bounds.BUSY_FLOOR  # measured: 2.66 ms of kernels in 26.4 ms of wall time
    assert stages.loc["decode", "bound"] == "launch/host"
    assert stages.loc["decode", "bound_why"] == f"the device is busy {busy:.0%} of the stage's wall time"
    page = headline_html(default_run.stages, default_run.kernels, default_run.peaks)
    assert "launch/host" in page and "CUDA graph" in page and "MFU against the bf16 peak" in page
    # shares of the run's wall time add up to the whole
    wall = default_run.stages["wall_ms"]
    assert f"{wall.iloc[1] / wall.sum():.1%}" in page
    line = headline_line("tinyllm", default_run.stages)
    assert "decode" in line and "launch/host" in line and "tinyllm/report.html" in line


def test_a_busy_stage_is_bound_by_the_unit_nearer_its_peak():
    graph = pd.read_csv(H100 / "graph_decode_stages.csv").set_index("stage", drop=False)
    decode = bounds.classify(graph.loc["decode"])
    assert graph.loc["decode", "busy_over_wall"] >= bounds.BUSY_FLOOR  # a replayed graph: 83% busy
    assert decode.bound == "latency" and "DRAM 19% of peak" in decode.why
    train = pd.read_csv(H100 / "train_stages.csv").set_index("stage", drop=False)
    opt = bounds.classify(train.loc["optimizer"])
    assert train.loc["optimizer", "dram_bw_util_busy"] >= bounds.NEAR_PEAK > train.loc["optimizer", "hfu_busy"]
    assert opt.bound == "memory" and "fewer bytes" in opt.advice


@pytest.mark.parametrize(
    "row,bound,says",
    [
        (
            {"busy_over_wall": 0.9, "hfu_busy": 0.85, "dram_bw_util_busy": 0.3, "mfu_busy_ceiling": 0.92},
            "compute",
            "little",
        ),
        (
            {"busy_over_wall": 0.9, "hfu_busy": 0.6, "dram_bw_util_busy": 0.3, "mfu_busy_ceiling": 0.65},
            "compute",
            "tile",
        ),
        ({"busy_over_wall": 0.9, "mfu_busy": 0.1, "bw_util_busy_model": 0.7}, "memory", "fewer bytes"),
        ({"busy_over_wall": 0.9}, "unknown", ""),
        ({}, "unknown", ""),
    ],
)
def test_thresholds(row, bound, says):
    b = bounds.classify(pd.Series({"stage": "s", **row}))
    assert b.bound == bound and says in b.advice


def test_kernel_names_are_shortened_for_the_headline():
    name = "void at::native::elementwise_kernel<(int)128, (int)4, at::native::CUDAFunctor_add<float>>(int, T3)"
    assert short_kernel(name) == "elementwise_kernel"
    assert short_kernel("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"


def test_peaks_are_named(default_run):
    assert isinstance(default_run.peaks, Peaks) and default_run.peaks.compute_source
