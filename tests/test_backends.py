"""The real workflow without a GPU: the default config on the CPU (torch backend), and analysis of GPU captures."""

import csv
import json
import math
import shutil

import pandas as pd
import pytest
from conftest import DATA, copy_workflow, snakemake

from nsightflow.records import Summary

F = DATA / "h200_tinyllm_filtered"
SASS = {"fadd": 1, "fmul": 1, "ffma": 2, "dadd": 1, "dmul": 1, "dfma": 2, "hadd": 2, "hmul": 2, "hfma": 4}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("cpu"))
    out = snakemake(wf, "--cores", "2", "results/report.html").stdout
    (wf / "terminal.txt").write_text(out)
    return wf


def test_default_config_on_the_cpu_reports_every_stage(cpu_run):
    st = pd.read_csv(cpu_run / "results" / "tinyllm" / "stages.csv").set_index("stage")
    # The default decoder's arithmetic, from its shapes: matmuls, plus attention counted in full.
    b, t, d, f, v, n, steps, h = 4, 512, 1024, 2816, 32000, 4, 8, 16

    def matmuls(tokens):
        return n * 2 * b * tokens * (d * 3 * d + d * d + d * 2 * f + f * d) + 2 * b * d * v

    def attention(sq, sk):
        return n * 2 * b * h * sq * sk * (2 * d // h)

    assert st.loc["prefill", "flops_analytic"] == matmuls(t) + attention(t, t)
    assert st.loc["prefill", "flops_analytic_causal"] == matmuls(t) + attention(t, t) * (t + 1) // (2 * t)
    assert st.loc["decode", "flops_analytic"] == sum(matmuls(1) + attention(1, t + s + 1) for s in range(steps))
    manifest = json.loads((cpu_run / "results" / "tinyllm" / "manifest.json").read_text())
    trace = json.loads((cpu_run / "results" / "tinyllm" / "torch" / "trace.json").read_text())
    for i, stage in enumerate(("prefill", "decode")):
        assert st.loc[stage, "wall_ms"] > 0 and st.loc[stage, "gpu_busy_ms"] > 0
        assert st.loc[stage, "bytes_analytic"] > 0 and st.loc[stage, "mfu_busy"] > 0
        # Wall time is the program's: the steps of the pass timed before torch.profiler started (one per step);
        # the profiled ranges' time, from the trace's own record_function events, is kept beside it.
        timed = manifest["program_wall_s"][stage]
        assert len(timed) == {"prefill": 1, "decode": steps}[stage]
        assert st.loc[stage, "wall_ms"] == pytest.approx(sum(timed) * 1e3)
        ranges = [e["dur"] for e in trace["traceEvents"] if e.get("name") == f"nsightflow:{i} {stage}"]
        assert len(ranges) == len(timed)
        assert st.loc[stage, "wall_profiled_ms"] == pytest.approx(sum(ranges) / 1e3)
        # Busy time is the operators' time (top-level operators on the range's thread, from the trace's own events),
        # or where that exceeds the program's wall, their share of the profiled steps applied to it: never above it.
        spans = [e for e in trace["traceEvents"] if e.get("name") == f"nsightflow:{i} {stage}"]
        ran = 0.0
        for r in spans:
            ops = [
                e
                for e in trace["traceEvents"]
                if e.get("cat") == "cpu_op" and e["tid"] == r["tid"] and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]
            ]
            ran += sum(
                o["dur"]
                for o in ops
                if not any(p is not o and p["ts"] <= o["ts"] and o["ts"] + o["dur"] <= p["ts"] + p["dur"] for p in ops)
            )
        wall = st.loc[stage, "wall_ms"]
        share = min(1.0, ran / sum(e["dur"] for e in spans))
        expected = ran / 1e3 if ran / 1e3 <= wall else share * wall  # as measured where it fits in the wall
        assert st.loc[stage, "gpu_busy_ms"] == pytest.approx(expected, rel=1e-6)
        assert st.loc[stage, "busy_over_wall"] <= 1
    html = (cpu_run / "results" / "report.html").read_text()
    assert "Backend: <b>torch</b>" in html and "no CUDA GPU" in html
    # The terminal says it too, when the run starts.
    assert "nsightflow: backend torch (profiler 'auto' chose torch.profiler" in (cpu_run / "terminal.txt").read_text()
    assert "<td class='label'>prefill</td>" in html and "<td class='label'>decode</td>" in html
    page = (cpu_run / "results" / "tinyllm" / "report.html").read_text()
    assert (
        "aten::mm" in page
        and "Roofline (per stage: model FLOPs over operator bytes" in page
        and "data:image/png;base64," in page
    )
    assert "<h3>Diagnostics</h3>" in page and "lower bound computed from tensor sizes" in page
    assert any(e.get("name") == "nsightflow:1 decode" for e in trace["traceEvents"])  # index, then the name
    # The ceiling was measured in the same program launch as the trace, in the workload's dtype; a stage that ran
    # faster than it proves the device faster, and becomes the ceiling (a note says so): no MFU above 100%.
    ceiling = json.loads((cpu_run / "results" / "tinyllm" / "ceilings.json").read_text())
    notes = Summary.read(cpu_run / "results" / "tinyllm" / "summary.json").notes()
    assert ceiling["dtype"] == "bfloat16" and len(ceiling["matmul_runs"]) == 5
    assert max(ceiling["matmul_runs"]) == ceiling["matmul_flops_per_s"]
    rates = st["flops_analytic_causal"] / (st["gpu_busy_ms"] * 1e-3)
    peak = max(ceiling["matmul_flops_per_s"], rates.max())
    for stage in ("prefill", "decode"):
        assert st.loc[stage, "mfu_busy"] == pytest.approx(rates[stage] / peak)
        assert st.loc[stage, "mfu_wall"] <= st.loc[stage, "mfu_busy"] <= 1 + 1e-9
        raised = any(n.startswith(f"{stage}: {stage} ran at") and "ceiling measured low" in n for n in notes)
        assert raised == (rates[stage] > ceiling["matmul_flops_per_s"] and rates[stage] == rates.max())
    assert ((st["bw_util_busy_model"] <= 1) | st["bw_util_busy_model"].isna()).all()


def _cells(path, metric):
    rows = list(csv.reader(path.open()))
    i = rows[0].index(metric)
    return [float(r[i].replace(",", "")) for r in rows[2:]]


def test_analysis_only_turns_gpu_captures_into_the_gpu_hosts_report(tmp_path):
    wf = copy_workflow(tmp_path / "wf")
    snakemake(wf, "--cores", "1", "results/report.html", "--config", f"captures={F}")
    out = wf / "results" / "captures" / "h200_tinyllm_filtered"
    st = pd.read_csv(out / "stages.csv").set_index("stage")
    # Prefill FLOPs straight from the export's cells (tensor pipes + SASS, FMA = 2).
    p = F / "prefill.raw.csv"
    flops = sum(
        sum(_cells(p, f"sm__ops_path_tensor_src_{x}.sum"))
        for x in ("bf16_dst_fp32", "fp16", "tf32_dst_fp32", "fp8", "fp64")
    )
    flops += sum(k * sum(_cells(p, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum")) for op, k in SASS.items())
    assert st.loc["prefill", "flops_measured"] == pytest.approx(flops, rel=1e-12)
    # Kernel times are the timeline's, from nvtx_kern_sum.
    kern = pd.read_csv(out / "kernels.csv")
    rows = [
        r
        for r in csv.DictReader((F / "stats" / "nvtx_kern_sum.csv").open())
        if r["NVTX Range"].startswith("nsightflow:")
    ]
    assert len(rows) > 30
    for r in rows:
        stage = r["NVTX Range"].split(":", 1)[1]
        row = kern[(kern["stage"] == stage) & (kern["kernel"] == r["Kernel Name"])]
        assert float(row["total_ns"].iloc[0]) == float(r["Total Time (ns)"])
    # The same numbers the GPU host's own run wrote (stages.csv saved from that run).
    host = pd.read_csv(F / "gpu_host_stages.csv").set_index("stage")
    for col in (
        "flops_measured",
        "dram_bytes_measured",
        "wall_ms",
        "gpu_busy_ms",
        "coverage",
        "mfu_busy",
        "hfu_busy",
        "dram_bw_util_busy",
        "executed_over_model",
    ):
        for stage in ("prefill", "decode"):
            assert math.isclose(st.loc[stage, col], host.loc[stage, col], rel_tol=1e-9), (stage, col)
    html = (wf / "results" / "report.html").read_text()
    assert "Backend: <b>captures</b>" in html and "captures/h200_tinyllm_filtered/report.html" in html
    page = (out / "report.html").read_text()
    assert "nvjet_sm90" in page and "Roofline (captured kernels, ncu counters)" in page
    assert ">per step</th>" in page  # launches per decode step, from the timeline


def test_missing_exports_name_the_command_that_makes_them(tmp_path):
    wf = copy_workflow(tmp_path / "wf")
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(F / "prefill.raw.csv", caps / "a.csv")  # an ncu export alone: no timeline
    proc = snakemake(wf, "--cores", "1", "results/report.html", "--config", f"captures={caps}", check=False)
    assert proc.returncode != 0 and "nsys stats --report nvtx_sum --report nvtx_kern_sum" in proc.stdout
    for f in ("nvtx_sum.csv", "nvtx_kern_sum.csv"):
        shutil.copy(F / "stats" / f, caps / f"x_{f}")
    proc = snakemake(wf, "--cores", "1", "results/report.html", "--config", f"captures={caps}", check=False)
    assert proc.returncode != 0 and "nsys export --type sqlite" in proc.stdout
    (caps / "a.csv").unlink()
    (caps / "run.ncu-rep").write_bytes(b"")  # a report with no export, and no ncu on this machine
    proc = snakemake(
        wf,
        "--cores",
        "1",
        "results/report.html",
        "--config",
        f"captures={caps}",
        "tools={ncu: /nonexistent/ncu}",
        check=False,
    )
    assert proc.returncode != 0 and "ncu --import run.ncu-rep --page raw --csv --print-units base" in proc.stdout
