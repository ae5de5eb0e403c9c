"""GPU tier: the whole workflow on the GPU host (H100/H200 with nsys and ncu); skipped elsewhere.

Run with ``pytest -m gpu``. NSIGHTFLOW_KEEP_RESULTS=DIR keeps each workflow's results (no .ncu-rep)
for refreshing tests/data/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import pandas as pd
import pytest
import yaml

from conftest import copy_workflow, snakemake
from nsightflow import ncu, torchprof

pytestmark = pytest.mark.gpu


def _keep(work, name):
    keep = os.environ.get("NSIGHTFLOW_KEEP_RESULTS")
    if keep:
        shutil.copytree(work / "results", f"{keep}/{name}", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.ncu-rep", "*.nsys-rep"))


def _configure(work, **changes):
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    for key, value in changes.items():
        cfg[key] = {**cfg[key], **value} if isinstance(cfg.get(key), dict) else value
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return {**os.environ, "PYTHONPATH": str(work / "tests")}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("wf"))
    start = time.time()
    snakemake(work, "--cores", "1", "results/report.html")
    print(f"\nworkflow: command to report in {time.time() - start:.1f} s")
    _keep(work, "default")
    return work / "results"


def test_every_capture_profiled_the_planned_kernels(run_dir):
    exports = sorted((run_dir / "tinyllm" / "ncu").glob("*.raw.csv"))
    assert exports, "no ncu exports"
    for export in exports:
        df, _ = ncu.parse_raw_csv(export)
        plan = json.loads((run_dir / "tinyllm" / "plans" / export.name.replace(".raw.csv", ".json")).read_text())
        print(f"{export.name}: {len(df)} results, plan {plan['launch_count']}, kernel filter {len(plan['kernels'])} names")
        assert plan["kernels"], "the default config filters captures to the selected kernels"
        assert len(df) == plan["launch_count"] >= 1
    pre = json.loads((run_dir / "preflight").glob("*.json").__next__().read_text())
    print("preflight:", {c["name"]: c["detail"] for c in pre["checks"]})
    assert all(c["ok"] for c in pre["checks"])


def test_decode_samples_come_from_configured_steps(run_dir):
    for export in sorted((run_dir / "tinyllm" / "ncu").glob("decode.step*.raw.csv")):
        step = int(export.name.split(".step")[1].split(".")[0])
        df, _ = ncu.parse_raw_csv(export)
        assert set(df["nvtx_range"]) == {"decode"}
        assert set(df["nvtx_payload"]) == {step}, f"{export.name}: payloads {set(df['nvtx_payload'])}"


def test_prefill_flops_match_flop_counter(run_dir):
    stages = pd.read_csv(run_dir / "tinyllm" / "stages.csv").set_index("stage")
    pre = stages.loc["prefill"]
    # Prefill's selected kernels cover under 100% of its time: compare the GEMM+attention FLOPs, which
    # the top kernels hold, against the causal-adjusted model count.
    rel = abs(pre["flops_measured"] - pre["flops_analytic_causal"]) / pre["flops_analytic_causal"]
    print(f"prefill FLOPs measured {pre['flops_measured']:.4g}, analytic causal-adjusted "
          f"{pre['flops_analytic_causal']:.4g}, FlopCounterMode {pre['flops_analytic']:.4g}: {rel:.2%} off")
    assert rel < 0.05
    for stage in ("prefill", "decode"):
        s = stages.loc[stage]
        assert s["mfu_busy"] > 0 and s["hfu_busy"] > 0 and s["mfu_busy_ceiling"] > 0
        print(f"{stage}: wall {s['wall_ms']:.3f} ms, busy {s['gpu_busy_ms']:.3f} ms, MFU wall {s['mfu_wall']:.2%}, "
              f"busy {s['mfu_busy']:.2%} (vs measured ceiling {s['mfu_busy_ceiling']:.2%}), HFU busy {s['hfu_busy']:.2%}, "
              f"executed/model {s['executed_over_model']:.2f}, DRAM BW util busy {s['dram_bw_util_busy']:.2%}, "
              f"coverage {s['coverage']:.1%}")


def test_report_pages(run_dir):
    html = (run_dir / "report.html").read_text()
    assert "Backend: <b>nsight</b>" in html and "<td>prefill</td>" in html and "<td>decode</td>" in html
    page = (run_dir / "tinyllm" / "report.html").read_text()
    assert "Roofline (captured kernels, ncu counters)" in page and "<h3>Diagnostics</h3>" in page
    assert "clocks not locked" in page and "measured ceilings" in page


def test_changing_top_n_reruns_selection_not_the_timeline(run_dir):
    work = run_dir.parent
    base = (work / "config" / "config.yaml").read_text()
    _configure(work, select={"top_n": 3})
    try:
        out = snakemake(work, "-n", "--cores", "1", "results/report.html").stdout
    finally:
        (work / "config" / "config.yaml").write_text(base)
    rules = set(re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):$", out, re.M))
    print("top_n 3 would run:", sorted(rules))
    assert "select_kernels" in rules and "aggregate" in rules
    assert not rules & {"timeline", "nsys_stats", "analytic_flops", "preflight", "ceilings"}
    assert "Nothing to be done" in snakemake(work, "-n", "--cores", "1", "results/report.html").stdout


def test_auto_unit_exports_parse_to_the_same_numbers(run_dir):
    rep = run_dir / "tinyllm" / "ncu" / "prefill.ncu-rep"
    auto = subprocess.run(["ncu", "--import", str(rep), "--page", "raw", "--csv"], capture_output=True, text=True,
                          check=True).stdout
    keep = os.environ.get("NSIGHTFLOW_KEEP_RESULTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        open(f"{keep}/prefill.autounits.raw.csv", "w").write(auto)
    a, units = ncu.parse_raw_csv(auto)
    b, _ = ncu.parse_raw_csv(run_dir / "tinyllm" / "ncu" / "prefill.raw.csv")
    print("auto units seen:", sorted(set(units.values())))
    for col in ("dram__bytes_read.sum", "gpu__time_duration.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
                "sm__cycles_elapsed.avg.per_second", "lts__t_bytes.sum"):
        assert a[col].to_numpy() == pytest.approx(b[col].to_numpy(), rel=5e-3), col


def test_torch_backend_on_the_gpu(tmp_path):
    work = copy_workflow(tmp_path / "wf")
    env = _configure(work, profiler="torch")
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    _keep(work, "torch")
    trace = torchprof.load_trace(work / "results" / "tinyllm" / "torch" / "trace.json")
    assert torchprof.device_kind(trace) == "gpu"
    st = pd.read_csv(work / "results" / "tinyllm" / "stages.csv").set_index("stage")
    k = pd.read_csv(work / "results" / "tinyllm" / "kernels.csv")
    print("torch backend on GPU:", st[["wall_ms", "gpu_busy_ms", "mfu_busy", "bw_util_busy_model"]].to_dict("index"))
    print("top decode kernels:", k[k.stage == "decode"].head(3)["kernel"].str.slice(0, 60).tolist())
    assert (st["gpu_busy_ms"] > 0).all() and (st["mfu_busy"] > 0).all()
    assert not k["kernel"].str.startswith("aten::").any()  # CUDA kernels, not operators


def test_at_sign_range_unsynchronised_workload_and_a_two_point_sweep(tmp_path):
    work = copy_workflow(tmp_path / "wf")
    env = _configure(work, workloads=[{"name": "mm", "callable": "workloads:gpu_matmuls",
                                       "args": {"stage": "LLM@prefill", "repeats": 3}, "sweep": {"n": [1024, 2048]}}])
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    _keep(work, "sweep")
    for n in (1024, 2048):
        st = pd.read_csv(work / "results" / "mm" / f"n~{n}" / "stages.csv").set_index("stage")
        export = next((work / "results" / "mm" / f"n~{n}" / "ncu").glob("*.raw.csv"))
        df, _ = ncu.parse_raw_csv(export)
        print(f"n={n}: {len(df)} results in range {set(df['nvtx_range'])}, tensor FLOPs "
              f"{df['sm__ops_path_tensor_src_bf16_dst_fp32.sum'].sum():.6g} (2n^3 x 3 = {6 * n**3:.6g}), "
              f"busy/wall {st.loc['LLM@prefill', 'busy_over_wall']:.2f}")
        assert set(df["nvtx_range"]) == {"LLM@prefill"}
        assert df["sm__ops_path_tensor_src_bf16_dst_fp32.sum"].sum() == 6 * n**3
    html = (work / "results" / "report.html").read_text()
    assert "<h3>Against n</h3>" in html


def test_range_replay_is_diagnosed_and_falls_back(tmp_path):
    work = copy_workflow(tmp_path / "wf")
    small = [{"name": "small", "callable": "nsightflow.decoder:build",
              "args": {"batch": 2, "prompt": 64, "decode_steps": 4, "n_layers": 2}}]
    env = _configure(work, ncu={"replay_mode": "range"}, workloads=small)
    target = "results/small/ncu/decode.step0.ncu-rep"
    snakemake(work, "--cores", "1", "results/small/selected_kernels.csv", env=env)  # the checkpoint plans captures
    # The default metrics include SASS counts, which range replay refuses.
    proc = snakemake(work, "--cores", "1", target, check=False, env=env)
    assert proc.returncode != 0 and "not collectable in range replay" in proc.stdout
    # Without them, range replay of a PyTorch decode step is refused for cuKernelSetAttribute ...
    env = _configure(work, ncu={"metrics": ["gpu__time_duration.sum", "dram__bytes_read.sum"]})
    proc = snakemake(work, "--cores", "1", target, check=False, env=env)
    print("range replay:", proc.stdout[proc.stdout.find("ncu captured nothing"):][:500])
    assert proc.returncode != 0 and "Unsupported API during capture" in proc.stdout
    assert "use replay_mode 'app-range' or 'kernel'" in proc.stdout
    # ... and with fallback on, the next mode produces the capture and the record says so.
    env = _configure(work, ncu={"fallback": True})
    snakemake(work, "--cores", "1", target, env=env)
    cmd = json.loads((work / "results/small/ncu/decode.step0.cmd.json").read_text())
    print("fallback:", cmd["fallback_from"], "->", cmd["replay_mode"])
    assert cmd["fallback_from"][0]["replay_mode"] == "range" and "cuKernelSetAttribute" in cmd["fallback_from"][0]["why"]
    assert cmd["replay_mode"] == "kernel"


def test_reports_from_another_machine_are_exported_and_analysed(run_dir, tmp_path):
    # A captures directory holding only binary reports: nsys and ncu export them first.
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(run_dir / "tinyllm" / "timeline" / "timeline.nsys-rep", caps / "run1.nsys-rep")
    shutil.copy(run_dir / "tinyllm" / "ncu" / "prefill.ncu-rep", caps / "p.ncu-rep")
    work = copy_workflow(tmp_path / "wf")
    snakemake(work, "--cores", "1", "results/report.html", "--config", f"captures={caps}")
    st = pd.read_csv(work / "results" / "captures" / "caps" / "stages.csv").set_index("stage")
    host = pd.read_csv(run_dir / "tinyllm" / "stages.csv").set_index("stage")
    print("from reports: prefill FLOPs", st.loc["prefill", "flops_measured"], "host", host.loc["prefill", "flops_measured"])
    assert st.loc["prefill", "flops_measured"] == pytest.approx(host.loc["prefill", "flops_measured"], rel=1e-9)
    assert st.loc["prefill", "gpu_busy_ms"] == pytest.approx(host.loc["prefill", "gpu_busy_ms"])


def test_two_gpus_run_two_captures_at_once_on_distinct_devices(tmp_path):
    from nsightflow.backend import gpus

    if len(gpus()) < 2:
        pytest.skip("needs a host with at least two GPUs")
    work = copy_workflow(tmp_path / "wf")
    env = _configure(work, workloads=[{"name": "mm", "callable": "workloads:gpu_matmuls",
                                       "args": {"n": 4096, "repeats": 20}, "sweep": {"stage": ["a", "b"]}}])
    snakemake(work, "results/report.html", "--cores", "4", "--resources", "gpu=2", env=env)
    spans = {}
    for point in ("a", "b"):
        log = (work / "results" / "mm" / f"stage~{point}" / "logs" / "timeline.log").read_text()
        m = re.search(r"device (\d) of (\d+) claimed \(CUDA_VISIBLE_DEVICES=\d\); ran from ([\d.]+) to ([\d.]+)", log)
        assert m, log[-500:]
        spans[point] = (m.group(1), float(m.group(3)), float(m.group(4)))
    print("timeline jobs (device, start, end):", spans)
    (da, sa, ea), (db, sb, eb) = spans["a"], spans["b"]
    assert da != db and sa < eb and sb < ea  # distinct devices, overlapping in time
