"""The torch.profiler backend on the CPU: a real trace of the built-in decoder, read into the nsys-shaped tables."""

import json
import subprocess
import sys

import pytest

from nsightflow.analysis import torchprof
from nsightflow.capture.launch import backend

SMALL = dict(
    batch=2,
    prompt=32,
    decode_steps=3,
    vocab=512,
    d_model=64,
    n_layers=2,
    n_heads=4,
    d_ff=96,
    dtype="float32",
    device="cpu",
)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsightflow.capture.inside.harness",
            "--mode",
            "torch",
            "--trace",
            str(d / "trace.json"),
            "--args",
            json.dumps(SMALL),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((d / "trace.json").read_text())


# The harness labels each stage's range by its index and name (nsightflow.capture.inside.passes.trace_label).
LABELS = {"0 prefill": "prefill", "1 decode": "decode"}


def _x(trace, cat):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_stage_table_sums_the_annotated_ranges(trace):
    st = torchprof.stage_table(trace, LABELS).set_index("stage")
    ann = _x(trace, "user_annotation")
    for stage, n, label in (("prefill", 1, "0 prefill"), ("decode", 3, "1 decode")):
        mine = [e for e in ann if e["name"] == f"nsightflow:{label}"]
        assert st.loc[stage, "range_instances"] == n == len(mine)
        assert st.loc[stage, "wall_ns"] == pytest.approx(1e3 * sum(e["dur"] for e in mine))


def test_operator_table_counts_matmuls_and_self_time(trace):
    k = torchprof.kernel_table(trace, LABELS)
    dec = k[k["stage"] == "decode"].set_index("kernel")
    # Per decode step: 4 projections per layer x 2 layers, plus the LM head: 9 aten::mm, 3 steps.
    assert dec.loc["aten::mm", "instances"] == 9 * 3
    assert torchprof.device_kind(trace) == "cpu"
    # Self times partition each range's top-level operators' time: their sum equals the sum of the
    # durations of operators not nested in another operator (computed here from the raw events).
    ops = _x(trace, "cpu_op")
    ann = [e for e in _x(trace, "user_annotation") if e["name"] == "nsightflow:0 prefill"][0]
    inside = [e for e in ops if ann["ts"] <= e["ts"] <= ann["ts"] + ann["dur"] and e["tid"] == ann["tid"]]
    top = [
        e
        for e in inside
        if not any(
            o is not e and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"] and o["dur"] > e["dur"]
            for o in inside
        )
    ]
    pre = k[k["stage"] == "prefill"]
    # The trace gives times in µs with three decimals: each operator's start and end are rounded to 1 ns, so
    # the partition may be off by up to 1 ns per operator (seen: 17 ns of 1.54 ms over a few hundred).
    assert pre["total_ns"].sum() == pytest.approx(1e3 * sum(e["dur"] for e in top), abs=len(inside))


def test_auto_backend_explains_its_choice():
    chosen, why = backend.resolve("auto", "/nonexistent/nsys", "/nonexistent/ncu")
    assert chosen == "torch" and "nsys not found ('/nonexistent/nsys')" in why
    assert backend.resolve("nsight", "nsys", "ncu") == ("nsight", "config 'profiler: nsight'")
    assert backend.resolve("auto", "nsys", "ncu", captures="d")[0] == "captures"
    with pytest.raises(ValueError, match="nsight, torch, auto"):
        backend.resolve("perf", "nsys", "ncu")


def test_gpu_trace_gives_the_gpu_hosts_kernel_table():
    # A real torch.profiler trace of the default workload on the H200 (CUDA kernels through CUPTI).
    import pandas as pd
    from conftest import DATA

    T = DATA / "h200_torch"
    trace = torchprof.load_trace(T / "trace.json")
    assert torchprof.device_kind(trace) == "gpu"
    got = torchprof.kernel_table(trace).set_index(["stage", "kernel"])
    host = pd.read_csv(T / "gpu_host_kernels.csv").set_index(["stage", "kernel"])
    assert set(got.index) == set(host.index)
    assert got.loc[host.index, "instances"].tolist() == host["instances"].tolist()
    assert got.loc[host.index, "total_ns"].tolist() == pytest.approx(host["total_ns"].tolist())
    # Decode's nvjet GEMM time, summed straight from the kernel events launched inside decode ranges.
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    dec = [e for e in ev if e["cat"] == "user_annotation" and e["name"] == "nsightflow:decode"]
    launch = {
        e["args"]["correlation"]: e
        for e in ev
        if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    name = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    total = sum(
        1e3 * k["dur"]
        for k in ev
        if k["cat"] == "kernel"
        and k["name"] == name
        and any(r["ts"] <= launch[k["args"]["correlation"]]["ts"] <= r["ts"] + r["dur"] for r in dec)
    )
    assert got.loc[("decode", name), "total_ns"] == pytest.approx(total)
