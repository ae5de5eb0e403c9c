"""GPU tier: the whole workflow on the GPU host (H100/H200 with nsys and ncu); skipped elsewhere.

Run with ``pytest -m gpu``. NSIGHTFLOW_KEEP_RESULTS=DIR keeps each workflow's results (no .ncu-rep)
for refreshing tests/data/. Expected values are computed here independently of the code under test:
classes by plain SQL over the SQLite export, results' stages and steps from ncu's own NVTX cells, and
the truth of scaled numbers from a full ncu capture of the same stages made in the same test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import (
    ROOT,
    SUITE_ENV,
    copy_workflow,
    exposed_by_hand,
    foreground_workflow,
    kernels_per_range,
    marked,
    moe_gemm_flops,
    plain_nsys,
    slow_ranks_script,
    snakemake,
    sql_launches,
    sql_rank_kernels,
    steady_rows,
    steady_steps,
    wait_gone,
)
from workloads import routing

from nsightflow import ncu_metrics
from nsightflow.analysis import torchprof
from nsightflow.capture.launch import ncu
from nsightflow.capture.read import ncu_csv
from nsightflow.records import Summary

pytestmark = pytest.mark.gpu

SMALL = {"batch": 4, "prompt": 256, "decode_steps": 4, "n_layers": 2}
ATTENTION = re.compile(r"flash|fmha|attention", re.I)


def _keep(work, name):
    keep = os.environ.get("NSIGHTFLOW_KEEP_RESULTS")
    if keep:
        shutil.copytree(
            work / "results",
            f"{keep}/{name}",
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("*.ncu-rep", "*.nsys-rep"),
        )


def _configure(work, **changes):
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    for key, value in changes.items():
        cfg[key] = {**cfg[key], **value} if isinstance(cfg.get(key), dict) else value
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return {**os.environ, "PYTHONPATH": str(work / "tests")}


def _run(tmp_path, name, workloads=None, **changes):
    """A fresh copy of the workflow, run to its report; returns (results dir, seconds)."""
    work = copy_workflow(tmp_path / name)
    env = _configure(work, **({"workloads": workloads} if workloads else {}), **changes)
    start = time.time()
    try:
        snakemake(work, "--cores", "1", "results/report.html", env=env)
    finally:
        _keep(work, name)  # a failed run's files too: its logs say why
    seconds = time.time() - start
    return work / "results", seconds


def _sql_probe_classes(sqlite, steps, domain="nsightflow"):
    """Classes of the probe pass's launches in ``steps`` ({(stage, step)}), by plain SQL and a plain loop:
    (stage, step, operator call, ordinal of the launch in that call, mangled kernel name, grid, block, smem)."""
    con = sqlite3.connect(sqlite)

    def ranges(dom):
        return con.execute(
            'SELECT n.start, n."end", COALESCE(n.text, s.value), COALESCE(n.int64Value, n.uint64Value, n.int32Value, '
            "n.uint32Value) FROM NVTX_EVENTS n JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = n.domainId "
            "AND d.text = ? LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 ORDER BY n.start",
            (dom,),
        ).fetchall()

    step_ranges = [r for r in ranges(f"{domain}.probe") if (r[2], r[3]) in steps]
    ops = ranges(f"{domain}.ops")
    kernels = con.execute(
        "SELECT rt.start, dn.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k.dynamicSharedMemory "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId "
        "JOIN StringIds dn ON dn.id = k.mangledName ORDER BY rt.start"
    ).fetchall()
    out, ordinal = [], Counter()
    for t, name, gx, gy, gz, bx, by, bz, smem in kernels:
        step = next(((s, p) for lo, hi, s, p in step_ranges if lo <= t <= hi), None)
        if step is None:
            continue
        op = next(((text, lo) for lo, hi, text, _ in ops if lo <= t <= hi), ("gap", None))
        ordinal[(step, op)] += 1
        out.append(
            (
                *step,
                op[0],
                ordinal[(step, op)] - 1,
                name,
                f"({gx}, {gy}, {gz})",
                f"({bx}, {by}, {bz})",
                int(smem),
                op[1],  # the operator call's instance (its start), or None between operators
            )
        )
    return out


def _expected_profiled(launches):
    """What one launch per class profiles, from ``_sql_probe_classes`` rows in time order: in each step, every
    operator call instance holding a launch whose (call, ordinal, kernel, grid, block, smem) no earlier step of the
    stage had (a call profiled once stands for every step), with all its launches; launches between operators
    (graph replays, compiled code) in every step, once per distinct launch."""
    seen, want = set(), set()
    by_step: dict = {}
    for row in launches:
        by_step.setdefault(row[:2], []).append(row)
    for (stage, _step), rows in by_step.items():
        new_units = {r[-1] for r in rows if r[2] != "gap" and (stage, *r[2:-1]) not in seen}
        for r in rows:
            if r[2] == "gap" or r[-1] in new_units:
                want.add(r[:-1])
        seen |= {(stage, *r[2:-1]) for r in rows if r[2] != "gap"}
    return want


def _result_places(raw, domain="nsightflow"):
    """(stage, step, operator index, operator call) of each ncu result, from its own NVTX cell."""
    out = []
    for stack in raw["nvtx_stack"]:
        step = next(((e["range"], e["payload"]) for e in stack if e["domain"] == f"{domain}.probe"), (None, None))
        op = next(((e["payload"], e["range"]) for e in stack if e["domain"] == f"{domain}.ops"), (None, "gap"))
        out.append((*step, *op))
    return out


def _cell_sums(raw, stages):
    """FLOPs (tensor pipes + SASS, FMA = 2) and DRAM bytes per stage, straight from an export's cells."""
    sass = {"fadd": 1, "fmul": 1, "ffma": 2, "dadd": 1, "dmul": 1, "dfma": 2, "hadd": 2, "hmul": 2, "hfma": 4}
    tensor = sum(raw[m] for m in ncu_metrics.TENSOR_FLOP_METRICS.values() if m in raw.columns)
    flops = tensor + sum(k * raw[f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"] for op, k in sass.items())
    dram = raw["dram__bytes_read.sum"] + raw["dram__bytes_write.sum"]
    return {
        s: (float(flops[stages == s].sum()), float(dram[stages == s].sum()), float(tensor[stages == s].sum()))
        for s in set(stages)
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    results, seconds = _run(tmp_path_factory.mktemp("wf"), "default")
    print(f"\nworkflow (default config, cold): command to report in {seconds:.1f} s")
    return results


def test_the_default_decoder_shows_both_mfus_and_memory_per_stage(run_dir):
    """MFU against the measured peak and against the datasheet's dense peak (what published MFU divides by), and each
    stage's peak memory: never below the weights and KV cache the model holds, never above the device's memory."""
    import torch

    run = run_dir / "tinyllm"
    st = pd.read_csv(run / "stages.csv").set_index("stage")
    peaks = json.loads((run / "summary.json").read_text())["peaks"]
    params = json.loads((run / "manifest.json").read_text())["params"]
    held = params["weights_bytes"] + params["kv_cache_bytes"]
    total = torch.cuda.get_device_properties(0).total_memory
    for stage, s in st.iterrows():
        print(
            f"{stage}: MFU on busy {s['mfu_busy']:.2%} (measured peak {peaks['compute'] / 1e12:.4g} TFLOP/s), "
            f"{s['mfu_busy_datasheet']:.2%} vs datasheet ({peaks['datasheet_compute'] / 1e12:.4g} TFLOP/s); peak "
            f"memory allocated {s['memory_allocated_peak'] / 2**20:.1f} MiB, reserved "
            f"{s['memory_reserved_peak'] / 2**20:.1f} MiB; the model holds {held / 2**20:.1f} MiB"
        )
        assert s["mfu_busy_datasheet"] == pytest.approx(s["mfu_busy"] * peaks["compute"] / peaks["datasheet_compute"])
        assert held <= s["memory_allocated_peak"] <= s["memory_reserved_peak"] <= total
    page = (run / "report.html").read_text()
    assert "MFU vs datasheet, wall / busy" in page and "the figure Megatron-LM, torchtitan and the Llama 3" in page


def test_one_launch_per_class_is_profiled_and_nothing_else(run_dir):
    run = run_dir / "tinyllm"
    plan = json.loads((run / "plan.json").read_text())
    raw, _ = ncu_csv.parse_raw_csv(run / "ncu" / "capture.raw.csv")
    log = (run / "logs" / "ncu_capture.log").read_text()
    assert ncu.profiled_count(log) == len(raw) == len(plan["expected"])
    steps = {(w["stage"], w["step"]) for w in plan["windows"]}
    want = _expected_profiled(_sql_probe_classes(run / "timeline" / "timeline.sqlite", steps))
    places = _result_places(raw)
    got, ordinal = Counter(), Counter()
    for (stage, step, op_i, op), name, grid, block, smem in zip(
        places,
        raw["Kernel Name"],
        raw["Grid Size"],
        raw["Block Size"],
        raw["launch__shared_mem_per_block_dynamic"].astype(float).astype(int),
        strict=True,
    ):
        ordinal[(stage, step, op_i)] += 1
        # nsightflow's export names kernels by their mangled names, which nsys records identically
        got[(stage, step, op, ordinal[(stage, step, op_i)] - 1, name, grid, block, smem)] += 1
    for stage, s in plan["stages"].items():
        print(
            f"{stage}: {s['launches']} launches in {s['steps']} step(s); {s['classes']} classes profiled once "
            f"each ({s['profiled']} launches) in steps {s['sampled_steps'] + s['extra_steps']}"
        )
    print(
        f"capture: {len(raw)} results for {len(want)} distinct (step, call, ordinal, kernel, grid, block, smem) not "
        "profiled in an earlier step"
    )
    assert set(got) == want, sorted(set(got) ^ want)[:5]
    assert all(n == 1 for n in got.values()), [k for k, n in got.items() if n > 1]
    # The windows were the planned units: each result's operator (from its NVTX cell) is the plan's.
    for (stage, step, op_i, _), e in zip(places, plan["expected"], strict=True):
        assert (stage, step) == (e["stage"], e["step"])
        assert op_i == ((e["unit"] - 1) // 2 if e["unit"] % 2 else None)
    # The bf16 decoder's GEMMs and attentions are all bf16: one precision collected (3 replay passes, not 6).
    cmd = json.loads((run / "ncu" / "capture.cmd.json").read_text())
    print(f"tensor precisions collected: {cmd['tensor_precisions']}")
    assert cmd["tensor_precisions"] == ["bf16"]
    # The eager decoder's first pass does no one-time work that launches kernels: ncu windowed the program's first
    # pass (no warm-up pass under ncu), and that capture matched the plan the first time.
    work = json.loads((run / "manifest.json").read_text())["first_pass_work"]
    program = cmd["argv"][cmd["argv"].index("-m") + 1 :]
    print(f"first pass's one-time work: {work}; ncu's launch: --warmup {program[program.index('--warmup') + 1]}")
    assert work == [] and program[program.index("--warmup") + 1] == "0" and cmd["set_aside"] is None
    checks = [c for f in sorted((run_dir / "preflight").glob("**/*.json")) for c in json.loads(f.read_text())["checks"]]
    print("preflight:", {c["name"]: c["detail"] for c in checks})
    assert {c["name"] for c in checks} >= {"GPU", "nsys", "ncu", "counters"} and all(c["ok"] for c in checks)


def test_stages_are_fully_covered_and_measured(run_dir):
    stages = pd.read_csv(run_dir / "tinyllm" / "stages.csv").set_index("stage")
    manifest = json.loads((run_dir / "tinyllm" / "manifest.json").read_text())
    for stage in ("prefill", "decode"):  # wall time: the timed pass's steps, before nsys's capture range
        assert stages.loc[stage, "wall_ms"] == pytest.approx(sum(manifest["program_wall_s"][stage]) * 1e3)
        # the probe pass alone was traced (test_the_probe_pass_traced_alone_launches_what_the_ranged_pass_does): its
        # steps' walls are the probe's, so no wall under the profiler is shown
        assert manifest["traced_pass"] == "probe" and pd.isna(stages.loc[stage, "wall_profiled_ms"])
    for stage in ("prefill", "decode"):
        s = stages.loc[stage]
        assert s["coverage"] == 1.0
        assert s["mfu_busy"] > 0 and s["hfu_busy"] > 0 and s["mfu_busy_ceiling"] > 0
        print(
            f"{stage}: wall {s['wall_ms']:.3f} ms, busy {s['gpu_busy_ms']:.3f} ms, classes {s['classes']}, profiled "
            f"{s['profiled_launches']}, MFU busy {s['mfu_busy']:.2%} "
            f"(vs measured ceiling {s['mfu_busy_ceiling']:.2%}), "
            f"HFU busy {s['hfu_busy']:.2%}, executed/model {s['executed_over_model']:.2f}, DRAM BW util busy "
            f"{s['dram_bw_util_busy']:.2%}, coverage {s['coverage']:.1%}"
        )
    pre = stages.loc["prefill"]
    rel = abs(pre["flops_tensor_measured"] - pre["flops_analytic_causal"]) / pre["flops_analytic_causal"]
    print(
        f"prefill tensor FLOPs measured {pre['flops_tensor_measured']:.4g}, analytic causal-adjusted "
        f"{pre['flops_analytic_causal']:.4g}: {rel:.2%} off"
    )
    assert rel < 0.05


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small decoder, representatives (first and last decode step), and its eager timeline; with the FLOPs
    outside the tensor pipes too (the default run leaves them out), so both paths meet a full capture."""
    wl = [{"name": "small", "callable": "nsightflow.workloads.decoder:build", "args": SMALL}]
    ncu_cfg = {"sample_steps": ["first", "last"], "non_tensor_flops": True}
    results, seconds = _run(tmp_path_factory.mktemp("small"), "small", wl, ncu=ncu_cfg)
    print(f"\nsmall decoder: command to report in {seconds:.1f} s")
    return results / "small"


def test_the_probe_pass_traced_alone_launches_what_the_ranged_pass_does(run_dir, tmp_path):
    """The default decoder's first pass does no one-time work, so its timeline traced the probe pass alone. Checked
    here against an nsys trace of the same program's ranged pass (the harness without a count: no probe pass), by
    plain SQL on both exports: the same kernels in the same order in every step, and the stage table's GPU busy time
    within 1% of the ranged pass's."""
    from nsightflow.capture.launch import nsys

    run = run_dir / "tinyllm"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["traced_pass"] == "probe" and manifest["first_pass_work"] == [] and manifest["stage_wall_s"] is None
    program = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--callable", manifest["callable"]]
    program += ["--args", json.dumps(manifest["args"]), "--timed"]
    argv = nsys.profile_argv(shutil.which("nsys"), tmp_path / "ranged", program, capture_range="none")
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    con = sqlite3.connect(tmp_path / "ranged.sqlite")
    assert con.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE text = 'nsightflow.probe'").fetchone()[0] == 0
    ranged, probe = sql_launches(tmp_path / "ranged.sqlite"), sql_launches(run / "timeline" / "timeline.sqlite")
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    for stage in ("prefill", "decode"):
        r, p = ranged[ranged.stage == stage], probe[probe.stage == stage]
        r_steps = {k: list(g["key"]) for k, g in r.groupby("step")}
        p_steps = {k: list(g["key"]) for k, g in p.groupby("step")}
        busy = r["duration_ns"].sum() / 1e6
        print(
            f"{stage}: ranged pass {len(r)} launches in {len(r_steps)} steps, busy {busy:.3f} ms; probe pass "
            f"{len(p)} launches, busy {p['duration_ns'].sum() / 1e6:.3f} ms; stage table busy "
            f"{stages.loc[stage, 'gpu_busy_ms']:.3f} ms ({stages.loc[stage, 'gpu_busy_ms'] / busy - 1:+.2%})"
        )
        assert r_steps == p_steps
        assert stages.loc[stage, "gpu_busy_ms"] == pytest.approx(busy, rel=0.01)


def test_representatives_match_a_full_capture_of_the_same_stages(small, tmp_path):
    # The reference: ncu over every launch of both stages (per-thread NVTX is exact here: one thread).
    base = tmp_path / "full"
    program = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(SMALL)]
    argv = ncu.reference_argv(
        shutil.which("ncu"), base, "nsightflow", ["prefill", "decode"], ncu_metrics.DEFAULT_METRICS, program
    )
    start = time.time()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    full_s = time.time() - start
    text = subprocess.run(
        ncu_csv.export_argv("ncu", f"{base}.ncu-rep"), capture_output=True, text=True, check=True
    ).stdout
    keep = os.environ.get("NSIGHTFLOW_KEEP_RESULTS")
    if keep:
        open(f"{keep}/small_full.raw.csv", "w").write(text)
    full, _ = ncu_csv.parse_raw_csv(text)
    truth = _cell_sums(full, full["nvtx_range"])
    stages = pd.read_csv(small / "stages.csv").set_index("stage")
    for stage in ("prefill", "decode"):
        f, d, t = truth[stage]
        mf, md = stages.loc[stage, "flops_measured"], stages.loc[stage, "dram_bytes_measured"]
        mt = stages.loc[stage, "flops_tensor_measured"]
        print(
            f"{stage}: FLOPs {mf:.6g} vs full {f:.6g} ({mf / f - 1:+.3%}); tensor {mt:.6g} vs {t:.6g} "
            f"({mt / t - 1:+.3%}); DRAM {md:.6g} vs full {d:.6g} "
            f"({md / d - 1:+.3%}); launches profiled {stages.loc[stage, 'profiled_launches']} vs "
            f"{int((full['nvtx_range'] == stage).sum())}"
        )
        assert abs(mf / f - 1) < 0.01 and abs(mt / t - 1) < 0.01 and abs(md / d - 1) < 0.01
    print(f"full capture of the small decoder: {len(full)} launches in {full_s:.1f} s")


def test_a_first_pass_that_differs_from_steady_state_is_captured_again_after_the_warm_up(tmp_path):
    # The step makes a buffer on its first call and keeps it (tests/workloads.py: first_use_state): one allocation,
    # so the timeline's harness sees no one-time work and ncu's launch windows the first pass, where the window of
    # the step's first operator holds the buffer's fill, not the planned GEMM. The capture job must see the
    # difference and capture again after the warm-up: the report then holds the GEMM, as planned.
    wl = {"name": "lazy", "callable": "workloads:first_use_state", "args": {"n": 1024, "device": "cuda"}}
    results, _ = _run(tmp_path, "lazy", workloads=[wl])
    run = results / "lazy"
    cmd = json.loads((run / "ncu" / "capture.cmd.json").read_text())
    log = (run / "logs" / "ncu_capture.log").read_text()
    work = json.loads((run / "manifest.json").read_text())["first_pass_work"]
    print(f"first pass's one-time work: {work}; set aside: {cmd['set_aside']}")
    assert work == [] and "differs from the plan" in log and cmd["set_aside"]
    program = cmd["argv"][cmd["argv"].index("-m") + 1 :]
    assert program[program.index("--warmup") + 1] == "1"  # the capture kept is the warmed-up one
    raw, _ = ncu_csv.parse_raw_csv(run / "ncu" / "capture.raw.csv")
    plan = json.loads((run / "plan.json").read_text())
    print(f"profiled: {list(raw['Kernel Name'])}; planned: {[e['kernel'][:60] for e in plan['expected']]}")
    assert list(raw["Kernel Name"]) == [e["mangled"] for e in plan["expected"]]
    assert not any("fill" in e["kernel"].lower() for e in plan["expected"])


def test_depth_does_not_grow_the_capture(run_dir, tmp_path):
    work = copy_workflow(tmp_path / "deep")
    env = _configure(
        work, workloads=[{"name": "deep", "callable": "nsightflow.workloads.decoder:build", "args": {"n_layers": 16}}]
    )
    snakemake(work, "--cores", "1", "results/deep/plan.json", env=env)
    deep = json.loads((work / "results" / "deep" / "plan.json").read_text())
    base = json.loads((run_dir / "tinyllm" / "plan.json").read_text())
    for stage in ("prefill", "decode"):
        d, b = deep["stages"][stage], base["stages"][stage]
        print(
            f"{stage}: 16 layers {d['launches']} launches, {d['classes']} classes, {d['profiled']} profiled; "
            f"4 layers {b['launches']} launches, {b['classes']} classes, {b['profiled']} profiled"
        )
        assert d["launches"] > 3 * b["launches"] and d["profiled"] == b["profiled"]


def test_training_backward_gets_autograd_kernels_and_twice_the_gemm_flops(tmp_path):
    wl = [
        {
            "name": "train",
            "callable": "nsightflow.workloads.training:build",
            "args": {"batch": 4, "seq": 256, "iterations": 2, "n_layers": 2},
        }
    ]
    results, seconds = _run(tmp_path, "train", wl, ncu={"sample_steps": ["first"]})
    run = results / "train"
    sql = sql_launches(run / "timeline" / "timeline.sqlite")
    bwd = sql[sql.stage == "backward"]
    other = int((bwd["same_thread"] == 0).sum())
    print(f"training: {seconds:.1f} s; backward window: {len(bwd)} kernels, {other} launched by another thread")
    assert other > 0.9 * len(bwd)
    kernels = pd.read_csv(run / "kernels.csv")
    per_stage = kernels.groupby("stage")["instances"].sum()
    assert per_stage["backward"] == len(bwd) and per_stage["forward"] == len(sql[sql.stage == "forward"])
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert (stages["coverage"] == 1.0).all()
    gemm = kernels[~kernels["kernel"].str.contains(ATTENTION)].groupby("stage")["flops_tensor"].sum()
    ratio = gemm["backward"] / gemm["forward"]
    print(
        f"GEMM tensor FLOPs measured: forward {gemm['forward']:.4g}, backward {gemm['backward']:.4g} "
        f"(ratio {ratio:.3f}); analytic GEMM ratio "
        f"{stages.loc['backward', 'flops_analytic_gemm'] / stages.loc['forward', 'flops_analytic_gemm']:.3f}; "
        "backward/forward measured tensor FLOPs "
        f"{stages.loc['backward', 'flops_tensor_measured'] / stages.loc['forward', 'flops_tensor_measured']:.3f}"
    )
    assert abs(ratio / 2 - 1) < 0.10


def test_training_iterations_are_measured_from_one_and_cost_no_more(tmp_path):
    """Four iterations launch the same calls as one: the capture profiles (almost) only the first, and the stages'
    measured numbers are four times those of a run of one iteration, captured separately in this test."""
    args = {"batch": 4, "seq": 256, "n_layers": 2, "optimizer": "adamw_fused"}
    wl = [
        {"name": "one", "callable": "nsightflow.workloads.training:build", "args": {**args, "iterations": 1}},
        {"name": "four", "callable": "nsightflow.workloads.training:build", "args": {**args, "iterations": 4}},
    ]
    results, seconds = _run(tmp_path, "iterations", wl)
    one = pd.read_csv(results / "one" / "stages.csv").set_index("stage")
    four = pd.read_csv(results / "four" / "stages.csv").set_index("stage")
    plans = {n: json.loads((results / n / "plan.json").read_text()) for n in ("one", "four")}
    logs = {n: (results / n / "logs" / "ncu_capture.log").read_text() for n in ("one", "four")}
    for stage in ("forward", "backward", "optimizer"):
        t1, t4 = one.loc[stage, "flops_tensor_measured"], four.loc[stage, "flops_tensor_measured"]
        d1, d4 = one.loc[stage, "dram_bytes_measured"], four.loc[stage, "dram_bytes_measured"]
        print(
            f"iterations {stage}: profiled {plans['one']['stages'][stage]['profiled']} (1 iteration) and "
            f"{plans['four']['stages'][stage]['profiled']} (4); tensor FLOPs 4 x one {4 * t1:.6g} vs four "
            f"{t4:.6g}; DRAM 4 x one {4 * d1:.6g} vs four {d4:.6g} ({d4 / (4 * d1) - 1:+.3%})"
        )
        assert t4 == pytest.approx(4 * t1, rel=1e-9) and abs(d4 / (4 * d1) - 1) < 0.01
        assert four.loc[stage, "coverage"] == 1.0
    extra = len(plans["four"]["expected"]) - len(plans["one"]["expected"])
    print(f"launches profiled: 1 iteration {len(plans['one']['expected'])}, 4 iterations +{extra}; {seconds:.1f} s")
    # The later iterations' forward and backward add nothing; the optimizer's scalar arguments (its step count)
    # change, so its few calls are profiled again in the last iteration.
    assert plans["four"]["stages"]["forward"]["profiled"] == plans["one"]["stages"]["forward"]["profiled"]
    assert plans["four"]["stages"]["backward"]["profiled"] == plans["one"]["stages"]["backward"]["profiled"]
    assert extra <= 0.1 * len(plans["one"]["expected"])
    assert all(ncu.profiled_count(logs[n]) == len(plans[n]["expected"]) for n in logs)


def _first_gpu() -> str:
    """The first GPU this test run may use, as CUDA_VISIBLE_DEVICES names it (an index or a UUID; "0" unset)."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"


def _gpu_local_cpus() -> list[int]:
    """A few CPUs of the GPU's NUMA node (its PCI device's local_cpulist), to run programs on the same cores. The GPU
    is the first one this test run may use: nvidia-smi numbers the host's GPUs whatever CUDA_VISIBLE_DEVICES says, so
    a run given GPU 2 of four pinned its programs to GPU 0's cores, which may be another NUMA node's."""
    first = _first_gpu()
    bus = subprocess.run(
        ["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", first], capture_output=True, text=True
    ).stdout.strip()
    path = f"/sys/bus/pci/devices/{('0000' + bus[8:]).lower()}/local_cpulist"
    cpus: list[int] = []
    for part in open(path).read().strip().split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus[1:] if len(cpus) > 1 else cpus


def test_wall_time_is_the_programs_not_the_profilers(tmp_path):
    """A launch-bound decode (16 layers, batch 1): its decode step's wall time as the timeline job measures it (the
    harness's timed pass, run under nsys's exact command before its capture range opens) against the same pass with
    no profiler. A process's pace on these hosts changes by up to 2x within seconds (benchmarks/pace_covariate.py), so
    launches of one arm against launches of the other (twelve a side: -5.5% on one machine) compare moments, not
    arms, and so did whole passes taking turns on a slower machine. Here the arms run at once and take turns step
    by step on one CPU (tests/lockstep.py), each step compared with the reference's steps just before and after
    it. Two controls in the same ring: the program with no profiler again (the design's own noise, held to the
    same 5%) and a pass traced by nsys (its cost must show)."""
    from lockstep import Arm, paired_ratios, run_ring

    from nsightflow.capture.launch import nsys

    args = {"batch": 1, "prompt": 128, "decode_steps": 16, "n_layers": 16}
    nsys_bin = shutil.which("nsys")

    def alone(program, i):
        return program

    def timeline(program, i):  # the timeline job's command line (nsightflow.capture.launch.tools.timeline)
        return nsys.profile_argv(nsys_bin, tmp_path / f"t{i}", program, capture_range="none")

    def traced(program, i):  # no SQLite export of its many kernels: only its passes' walls are wanted
        return [a if a != "--export=sqlite" else "--export=none" for a in timeline(program, i)]

    arms = [
        Arm("no profiler", alone),
        Arm("under nsys before its capture range (the timed pass)", timeline),
        Arm("no profiler again (control)", alone),
        Arm("under nsys, traced (control)", traced, traced=True),
    ]
    rounds = 40
    cpu = (_gpu_local_cpus()[2:3] or _gpu_local_cpus())[0]
    out = run_ring(tmp_path, arms, rounds, args, cpu, 500)
    ref = [statistics.median(p["walls"]["decode"]) for p in out[0]["passes"]]
    got = {}
    for arm, o in zip(arms[1:], out[1:], strict=True):
        ratios = paired_ratios(out[0], o, "decode")
        q = statistics.quantiles(ratios, n=4)
        own = [statistics.median(p["walls"]["decode"]) for p in o["passes"]]
        got[arm.name] = statistics.median(ratios) - 1
        print(
            f"{arm.name}: {got[arm.name]:+.1%}, median of {len(ratios)} paired steps (quartiles {q[0] - 1:+.1%} to "
            f"{q[2] - 1:+.1%}); its passes' median steps {statistics.median(own) * 1e3:.2f} ms "
            f"({min(own) * 1e3:.2f} to {max(own) * 1e3:.2f})"
        )
    print(
        f"launch-bound decode, {rounds} passes x 16 steps an arm, turns step by step on CPU {cpu}; no profiler, "
        f"its passes' median steps {statistics.median(ref) * 1e3:.2f} ms ({min(ref) * 1e3:.2f} to {max(ref) * 1e3:.2f})"
    )
    assert abs(got[arms[1].name]) < 0.05
    assert abs(got[arms[2].name]) < 0.05  # the design resolves 5%
    assert got[arms[3].name] > 0.15  # and sees a profiler that slows the program


def test_cuda_graph_decode_is_attributed_and_measures_what_eager_does(small, tmp_path):
    wl = [{"name": "graph", "callable": "nsightflow.workloads.decoder:build", "args": {**SMALL, "cuda_graph": True}}]
    results, seconds = _run(tmp_path, "graph", wl, ncu={"sample_steps": ["first", "last"]})
    run = results / "graph"
    sql = sql_launches(run / "timeline" / "timeline.sqlite")
    eager = sql_launches(small / "timeline" / "timeline.sqlite")
    g, e = sql[sql.stage == "decode"], eager[eager.stage == "decode"]
    print(
        f"CUDA graph decode: {seconds:.1f} s; kernels per step {g.groupby('step').size().to_dict()} "
        f"(in graphs: {int(g['graph'].sum())}); eager {e.groupby('step').size().to_dict()}"
    )
    assert g["graph"].all() and (g.groupby("step").size() == e.groupby("step").size()).all()
    st = pd.read_csv(run / "stages.csv").set_index("stage")
    ref = pd.read_csv(small / "stages.csv").set_index("stage")
    cmd = json.loads((run / "ncu" / "capture.cmd.json").read_text())
    rel = st.loc["decode", "flops_tensor_measured"] / ref.loc["decode", "flops_tensor_measured"] - 1
    print(
        f"decode tensor FLOPs: graph {st.loc['decode', 'flops_tensor_measured']:.6g}, "
        f"eager {ref.loc['decode', 'flops_tensor_measured']:.6g} ({rel:+.3%}); coverage "
        f"{st.loc['decode', 'coverage']:.1%}; precisions collected {cmd['tensor_precisions']}: {cmd['precisions_how']}"
    )
    assert abs(rel) < 0.01 and st.loc["decode", "coverage"] == 1.0
    # The graph's precisions are those the eagerly run prefill's operators ran in: one, not all five.
    assert cmd["tensor_precisions"] == ["bf16"]
    notes = Summary.read(run / "summary.json").notes()
    assert any("replays CUDA graphs" in n for n in notes)  # no analytic decode FLOPs, and the report says why


def test_range_results_beside_the_kernel_totals(tmp_path):
    wl = [{"name": "ranges", "callable": "nsightflow.workloads.decoder:build", "args": SMALL}]
    results, seconds = _run(tmp_path, "ranges", wl, ncu={"sample_steps": ["first", "last"], "ranges": "app-range"})
    st = pd.read_csv(results / "ranges" / "stages.csv").set_index("stage")
    for stage in ("prefill", "decode"):
        s = st.loc[stage]
        print(
            f"{stage}: tensor FLOPs ranges {s['flops_tensor_ranges']:.6g} vs kernels {s['flops_tensor_measured']:.6g}; "
            f"DRAM ranges {s['dram_bytes_ranges']:.6g} vs kernels {s['dram_bytes_measured']:.6g}"
        )
        assert abs(s["flops_tensor_ranges"] / s["flops_tensor_measured"] - 1) < 0.01
    print(f"range capture run: {seconds:.1f} s")


GQA_LLAMA = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
MQA_QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}


@pytest.mark.parametrize("name,config", [("llama", GQA_LLAMA), ("qwen2", MQA_QWEN2)])
def test_huggingface_models_measure_their_analytic_flops(tmp_path, name, config):
    wl = [
        {
            "name": name,
            "callable": "nsightflow.workloads.hf:build",
            "args": {"config": config, "batch": 4, "prompt": 512, "decode_steps": 8},
        }
    ]
    results, seconds = _run(tmp_path, name, wl)
    st = pd.read_csv(results / name / "stages.csv").set_index("stage")
    pre = st.loc["prefill"]
    rel = pre["flops_tensor_measured"] / pre["flops_analytic_causal"] - 1
    # Like for like: the measured FLOPs of the kernels that GEMM and attention operators launched, against
    # the model's GEMM and (causal) attention FLOPs; elementwise kernels' FLOPs are outside the model count.
    model_ops = pre["flops_measured_gemm"] + pre["flops_measured_attention"]
    rel_ops = model_ops / pre["flops_analytic_causal"] - 1
    rel_gemm = pre["flops_measured_gemm"] / pre["flops_analytic_gemm"] - 1
    causal_att = pre["flops_analytic_causal"] - pre["flops_analytic_gemm"]
    print(
        f"{name} ({config['num_key_value_heads']} KV heads of 16): {seconds:.1f} s; prefill tensor FLOPs measured "
        f"{pre['flops_tensor_measured']:.5g}, analytic {pre['flops_analytic_causal']:.5g} ({rel:+.2%}); of GEMM and "
        f"attention operators {model_ops:.5g} ({rel_ops:+.2%}); GEMM {pre['flops_measured_gemm']:.5g} vs "
        f"{pre['flops_analytic_gemm']:.5g} ({rel_gemm:+.2%}); attention {pre['flops_measured_attention']:.5g} "
        f"(model: causal {causal_att:.5g}, full {pre['flops_analytic_attention']:.5g}); other "
        f"{pre['flops_measured_other']:.4g}, outside operators {pre['flops_measured_unattributed']:.4g}; "
        f"MFU busy prefill {pre['mfu_busy']:.2%}, decode {st.loc['decode', 'mfu_busy']:.2%}; coverage "
        f"{st['coverage'].tolist()}; profiled {st['profiled_launches'].tolist()}"
    )
    assert abs(rel_ops) < 0.02 and abs(rel_gemm) < 0.01
    assert causal_att <= pre["flops_measured_attention"] <= pre["flops_analytic_attention"]
    assert (st["mfu_busy"] > 0).all() and (st["coverage"] == 1.0).all()


# The corpus's small configs (benchmarks/gpu_record.py records the name corpus from the same programs).
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_record import GPT2 as SMALL_GPT2  # noqa: E402
from gpu_record import LLAMA as SMALL_LLAMA  # noqa: E402
from gpu_record import MIXTRAL as SMALL_MIXTRAL  # noqa: E402

TRAIN_STEP = {"batch": 2, "seq": 128, "iterations": 1}
# Programs whose model code nsightflow did not write (HuggingFace's), as people train and serve them; each
# made the engine refuse the capture when kernels were joined by their demangled names.
REAL_PROGRAMS = [
    {
        "name": "llama_fused_adamw",
        "callable": "nsightflow.workloads.training:build",
        "args": {**TRAIN_STEP, "config": SMALL_LLAMA, "optimizer": "adamw_fused"},
    },
    {
        "name": "gpt2_autocast",
        "callable": "nsightflow.workloads.training:build",
        "args": {
            **TRAIN_STEP,
            "config": SMALL_GPT2,
            "dtype": "float32",
            "autocast": "bfloat16",
            "optimizer": "adamw_fused",
        },
    },
    {
        "name": "mixtral",
        "callable": "nsightflow.workloads.hf:build",
        "args": {"config": SMALL_MIXTRAL, "batch": 1, "prompt": 64, "decode_steps": 3},
    },
]


@pytest.fixture(scope="module")
def real_programs(tmp_path_factory):
    """The programs to reports with one launch per class, and again with every launch of the same sampled steps
    profiled (through the plan's windows, which see autograd's thread, unlike an NVTX-filtered ncu)."""
    tmp = tmp_path_factory.mktemp("real")
    steps = {"sample_steps": ["first", "last"]}
    results, seconds = _run(tmp, "real", REAL_PROGRAMS, ncu=steps)
    full, full_s = _run(tmp, "real_full", REAL_PROGRAMS, ncu={**steps, "capture": "every_launch"})
    print(f"\nreal programs: representatives {seconds:.1f} s, every launch {full_s:.1f} s")
    return results, full


@pytest.mark.parametrize("wl", REAL_PROGRAMS, ids=[w["name"] for w in REAL_PROGRAMS])
def test_real_programs_report_and_match_a_capture_of_every_launch(real_programs, wl):
    results, full = real_programs
    st = pd.read_csv(results / wl["name"] / "stages.csv").set_index("stage")
    ref = pd.read_csv(full / wl["name"] / "stages.csv").set_index("stage")
    cmd = json.loads((results / wl["name"] / "ncu" / "capture.cmd.json").read_text())
    print(f"{wl['name']}: precisions {cmd['tensor_precisions']}, SASS counts {cmd['non_tensor_flops']}")
    assert (st["coverage"] == 1.0).all() and (ref["coverage"] == 1.0).all()
    for stage in st.index:
        t, rt = st.loc[stage, "flops_tensor_measured"], ref.loc[stage, "flops_tensor_measured"]
        d, rd = st.loc[stage, "dram_bytes_measured"], ref.loc[stage, "dram_bytes_measured"]
        print(
            f"{wl['name']} {stage}: tensor FLOPs {t:.6g} vs every launch {rt:.6g} "
            f"({(t / rt - 1) if rt else 0:+.3%}); DRAM {d:.6g} vs {rd:.6g} ({d / rd - 1:+.3%}); profiled "
            f"{st.loc[stage, 'profiled_launches']} of {ref.loc[stage, 'profiled_launches']}"
        )
        assert (t == rt == 0) or abs(t / rt - 1) < 0.01
        assert abs(d / rd - 1) < 0.01
    # The HuggingFace models' float32 rotary matmul (a few thousand of a stage's FLOPs) does not buy the SASS counts.
    if wl["name"] != "gpt2_autocast":
        assert cmd["non_tensor_flops"] is False


def test_every_precision_the_operators_use_is_collected(tmp_path):
    # dtype bfloat16, but the workload also multiplies in float16 and (TF32 allowed) in float32.
    n = 2048
    wl = [{"name": "mixed", "callable": "workloads:mixed_precision", "args": {"n": n}}]
    results, seconds = _run(tmp_path, "mixed", wl)
    cmd = json.loads((results / "mixed" / "ncu" / "capture.cmd.json").read_text())
    st = pd.read_csv(results / "mixed" / "stages.csv").set_index("stage")
    print(
        f"mixed precisions: {seconds:.1f} s; collected {cmd['tensor_precisions']}; tensor FLOPs "
        f"{st.loc['mixed', 'flops_tensor_measured']:.6g} (3·2·n³ = {3 * 2 * n**3:.6g})"
    )
    assert cmd["tensor_precisions"] == ["bf16", "fp16", "tf32"]
    assert st.loc["mixed", "flops_tensor_measured"] == pytest.approx(3 * 2 * n**3, rel=1e-6)


MOE_AND_FLEX = [
    {"name": "experts", "callable": "workloads:grouped_experts", "args": {}},
    {"name": "flex", "callable": "workloads:flex_causal", "args": {}},
    {
        "name": "mixtral",
        "callable": "nsightflow.workloads.hf:build",
        "args": {"config": SMALL_MIXTRAL, "batch": 1, "prompt": 1024, "decode_steps": 3},
    },
    {
        "name": "custom",
        "callable": "workloads:custom_matmul",
        "args": {"n": 4096, "device": "cuda", "dtype": "bfloat16"},
    },
]


def test_moe_grouped_gemms_and_flex_attention_are_counted_and_measured(tmp_path):
    """Targets of the MoE and flex attention counts: each stage's analytic FLOPs against a count from its shapes
    written here, its measured tensor FLOPs against ncu over every launch of the same steps."""
    steps = {"sample_steps": ["first", "last"]}
    results, seconds = _run(tmp_path, "moe", MOE_AND_FLEX, ncu=steps)
    full, full_s = _run(tmp_path, "moe_full", MOE_AND_FLEX, ncu={**steps, "capture": "every_launch"})
    print(f"\nMoE and flex: representatives {seconds:.1f} s, every launch {full_s:.1f} s")

    def mixtral_gemm(tokens, steps=1):
        return steps * moe_gemm_flops(SMALL_MIXTRAL, 1, tokens)

    b, heads, seq, dh = 4, 16, 2048, 64
    expected = {
        ("experts", "experts"): 2 * 4096 * 1024 * 1536,
        ("flex", "attention"): 2 * 2 * dh * b * heads * seq * (seq + 1) // 2,
        ("mixtral", "prefill"): mixtral_gemm(1024),
        ("mixtral", "decode"): mixtral_gemm(1, 3),
    }
    for (name, stage), want in expected.items():
        st = pd.read_csv(results / name / "stages.csv").set_index("stage")
        ref = pd.read_csv(full / name / "stages.csv").set_index("stage")
        col = "flops_analytic_causal" if name == "flex" else "flops_analytic_gemm"
        got = st.loc[stage, col]
        t, rt = st.loc[stage, "flops_tensor_measured"], ref.loc[stage, "flops_tensor_measured"]
        print(
            f"{name} {stage}: analytic {got:.6g} vs shapes {want:.6g} ({got / want - 1:+.3%}); tensor FLOPs {t:.6g} "
            f"vs every launch {rt:.6g} ({t / rt - 1:+.3%}); MFU busy {st.loc[stage, 'mfu_busy']:.2%}, HFU busy "
            f"{st.loc[stage, 'hfu_busy']:.2%}"
        )
        assert abs(got / want - 1) < (0.001 if name == "experts" else 0.01)
        assert t > 0 and abs(t / rt - 1) < 0.01
        assert (st["coverage"] == 1.0).all()
    # The MoE view: the grouped GEMM's tokens per expert are the workload's routing; its rate is its tensor FLOPs over
    # its kernels' time (measured against every launch).
    routed = pd.read_csv(results / "experts" / "experts.csv")
    assert [int(x) for x in routed["tokens_per_expert"].iloc[0].split()] == routing(4096, 8).tolist()
    st = pd.read_csv(results / "experts" / "stages.csv").set_index("stage").loc["experts"]
    ref = pd.read_csv(full / "experts" / "stages.csv").set_index("stage").loc["experts"]
    rate = ref["flops_tensor_measured"] / (st["expert_gemm_ms"] * 1e-3)
    share = st["expert_gemm_share"]
    print(f"experts: rate {st['expert_gemm_flop_rate']:.4g} vs every launch {rate:.4g}, share {share:.2%}")
    assert abs(st["expert_gemm_flop_rate"] / rate - 1) < 0.01 and st["expert_gemm_share"] > 0.9
    # The grouped GEMM executes each expert's tokens in whole tiles: its executed FLOPs lie within the count's tile
    # bound, and the note says padding; so does Mixtral's decode, one token per expert.
    for name, stage in (("experts", "experts"), ("mixtral", "decode")):
        notes = Summary.read(results / name / "summary.json").notes()
        said = [n for n in notes if n.startswith(f"{stage}:") and "x the model's FLOPs (HFU > MFU)" in n]
        print(f"{name} {stage}:", said)
        assert said and "padding:" in said[0] and "tokens an expert" in said[0]
    # An operator with no formula: named, with its kernels' tensor FLOPs (2·n³ a step, against every launch), and
    # every tensor precision collected for it.
    st = pd.read_csv(results / "custom" / "stages.csv").set_index("stage").loc["step"]
    ref = pd.read_csv(full / "custom" / "stages.csv").set_index("stage").loc["step"]
    left, want = st["flops_not_counted"], 2 * 2 * 4096**3
    print(f"custom: not counted {left:.6g} vs 2·n³·steps {want:.6g}; {st['not_counted_ops']}")
    assert st["not_counted_ops"].startswith("nsf_workloads.fused_mm (2 calls")
    assert abs(left / want - 1) < 0.01 and abs(left / ref["flops_not_counted"] - 1) < 0.01
    assert st["flops_analytic"] == want
    argv = " ".join(json.loads((results / "custom" / "ncu" / "capture.cmd.json").read_text())["argv"])
    assert "sm__ops_path_tensor_src_fp8.sum" in argv  # every precision, not only the bf16 of the mm beside it


def test_compiled_decoder_on_the_gpu(small, tmp_path):
    wl = [{"name": "compiled", "callable": "nsightflow.workloads.decoder:build", "args": {**SMALL, "compile": True}}]
    results, seconds = _run(tmp_path, "compiled", wl, ncu={"sample_steps": ["first", "last"]})
    st = pd.read_csv(results / "compiled" / "stages.csv").set_index("stage")
    eager = pd.read_csv(small / "stages.csv").set_index("stage")
    plan = json.loads((results / "compiled" / "plan.json").read_text())
    print(f"compiled decoder: {seconds:.1f} s; windows {[w['why'][:60] for w in plan['windows']]}")
    for stage in ("prefill", "decode"):
        print(
            f"{stage}: FLOPs compiled {st.loc[stage, 'flops_measured']:.5g}, "
            f"eager {eager.loc[stage, 'flops_measured']:.5g};"
            f" busy {st.loc[stage, 'gpu_busy_ms']:.3f} ms vs {eager.loc[stage, 'gpu_busy_ms']:.3f} ms; MFU busy "
            f"{st.loc[stage, 'mfu_busy']:.2%}"
        )
        assert st.loc[stage, "mfu_busy"] > 0 and st.loc[stage, "coverage"] == 1.0
    # The tensor work is the model's either way (fusion changes the elementwise kernels, not the GEMMs).
    assert st.loc["prefill", "flops_tensor_measured"] == pytest.approx(
        eager.loc["prefill", "flops_tensor_measured"], rel=0.02
    )


def test_changing_top_n_reruns_only_aggregation_and_reports(run_dir):
    work = run_dir.parent
    base = (work / "config" / "config.yaml").read_text()
    _configure(work, select={"top_n": 3})
    try:
        out = snakemake(work, "-n", "--cores", "1", "results/report.html").stdout
    finally:
        (work / "config" / "config.yaml").write_text(base)
    rules = set(re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):$", out, re.M))
    print("top_n 3 would run:", sorted(rules))
    assert rules == {"aggregate", "run_report", "report"}
    assert "Nothing to be done" in snakemake(work, "-n", "--cores", "1", "results/report.html").stdout


def test_report_pages(run_dir):
    html = (run_dir / "report.html").read_text()
    assert (
        "Backend: <b>nsight</b>" in html
        and "<td class='label'>prefill</td>" in html
        and "<td class='label'>decode</td>" in html
    )
    page = (run_dir / "tinyllm" / "report.html").read_text()
    # The default capture of this bf16 workload collects the tensor pipes' FLOPs only (ncu.non_tensor_flops: auto).
    heading = "Roofline (captured kernels, ncu counters; tensor-pipe FLOPs: kernels without tensor work are not shown)"
    assert heading in page and "<h3>Diagnostics</h3>" in page
    assert "clocks not locked" in page and "measured ceilings" in page and "one profiled launch per class" in page


def test_auto_unit_exports_parse_to_the_same_numbers(run_dir):
    rep = run_dir / "tinyllm" / "ncu" / "capture.ncu-rep"
    auto = subprocess.run(
        ["ncu", "--import", str(rep), "--page", "raw", "--csv"], capture_output=True, text=True, check=True
    ).stdout
    a, units = ncu_csv.parse_raw_csv(auto)
    b, _ = ncu_csv.parse_raw_csv(run_dir / "tinyllm" / "ncu" / "capture.raw.csv")
    print("auto units seen:", sorted(set(units.values())))
    for col in (
        "dram__bytes_read.sum",
        "gpu__time_duration.sum",
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
        "sm__cycles_elapsed.avg.per_second",
        "lts__t_bytes.sum",
    ):
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
    assert (st["gpu_busy_ms"] > 0).all() and ((st["mfu_busy"] > 0) & (st["mfu_busy"] < 1)).all()
    assert not k["kernel"].str.startswith("aten::").any()  # CUDA kernels, not operators


def test_at_sign_range_unsynchronised_workload_and_a_two_point_sweep(tmp_path):
    work = copy_workflow(tmp_path / "wf")
    env = _configure(
        work,
        workloads=[
            {
                "name": "mm",
                "callable": "workloads:gpu_matmuls",
                "args": {"stage": "LLM@prefill", "repeats": 3},
                "sweep": {"n": [1024, 2048]},
            }
        ],
    )
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    _keep(work, "sweep")
    for n in (1024, 2048):
        run = work / "results" / "mm" / f"n~{n}"
        st = pd.read_csv(run / "stages.csv").set_index("stage")
        raw, _ = ncu_csv.parse_raw_csv(run / "ncu" / "capture.raw.csv")
        tensor = raw["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
        print(
            f"n={n}: {len(raw)} result(s) in {set(p[0] for p in _result_places(raw))}, tensor FLOPs per result "
            f"{tensor.tolist()} (2n^3 = {2 * n**3}), "
            f"stage tensor FLOPs {st.loc['LLM@prefill', 'flops_tensor_measured']:.6g}"
            f" (3 x 2n^3 = {6 * n**3}), busy/wall {st.loc['LLM@prefill', 'busy_over_wall']:.2f}"
        )
        # Three identical matmuls: one class, profiled once, scaled by the timeline's three launches.
        assert {p[0] for p in _result_places(raw)} == {"LLM@prefill"} and (tensor == 2 * n**3).all()
        assert st.loc["LLM@prefill", "flops_tensor_measured"] == 6 * n**3
        # No dtype declared: MFU divides by the bf16 peak the probe pass saw the matmuls run in.
        assert json.loads((run / "manifest.json").read_text())["precision"] == "bf16"
        assert 0 < st.loc["LLM@prefill", "mfu_busy"] < 1
    assert "<h3>Against n (workload argument swept)</h3>" in (work / "results" / "report.html").read_text()


def test_reports_from_another_machine_are_exported_and_analysed(run_dir, tmp_path):
    # A captures directory holding only binary reports: nsys and ncu export them first.
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(run_dir / "tinyllm" / "timeline" / "timeline.nsys-rep", caps / "run1.nsys-rep")
    shutil.copy(run_dir / "tinyllm" / "ncu" / "capture.ncu-rep", caps / "c.ncu-rep")
    work = copy_workflow(tmp_path / "wf")
    snakemake(work, "--cores", "1", "results/report.html", "--config", f"captures={caps}")
    st = pd.read_csv(work / "results" / "captures" / "caps" / "stages.csv").set_index("stage")
    host = pd.read_csv(run_dir / "tinyllm" / "stages.csv").set_index("stage")
    for stage in ("prefill", "decode"):
        print(
            f"from reports: {stage} tensor FLOPs {st.loc[stage, 'flops_tensor_measured']:.6g}, "
            f"host {host.loc[stage, 'flops_tensor_measured']:.6g}"
        )
        got, want = st.loc[stage, "flops_tensor_measured"], host.loc[stage, "flops_tensor_measured"]
        assert got == pytest.approx(want, rel=1e-9)
        assert st.loc[stage, "gpu_busy_ms"] == pytest.approx(host.loc[stage, "gpu_busy_ms"])


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupting_a_profile_stops_the_profiler_and_the_workload(tmp_path, how):
    """Ctrl-C or SIGTERM to the workflow's group while the workload sleeps in its stage: the workload and every
    harness of this workflow end, and no timeline is published. The workflow starts as a terminal's foreground job
    (conftest.foreground_workflow): a test run started in the background ignores SIGINT, and so would its children."""
    import signal

    marker = tmp_path / "pid"
    work = copy_workflow(tmp_path / "wf")
    env = _configure(
        work, workloads=[{"name": "w", "callable": "workloads:slow", "args": {"marker": str(marker), "seconds": 60}}]
    )
    proc = foreground_workflow(work, env)
    try:
        deadline = time.time() + 180
        while not (marker.exists() and marker.read_text()) and time.time() < deadline:
            time.sleep(0.5)
        workload = int(marker.read_text())  # the first harness in its stage (the timed pass, or the one under nsys)
        os.killpg(proc.pid, signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)
        proc.wait(timeout=120)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # a failure here must not leave this workflow to the next tests
        proc.wait()
        raise
    gone = wait_gone([workload])  # a zombie has ended: only its reaping is left (by init, once its job has gone)
    ours = {str(p) for p in marked(os.environ[SUITE_ENV])}  # another test run's harness on this host is not ours
    harnesses = subprocess.run(["pgrep", "-f", "nsightflow.capture.inside.harness"], capture_output=True, text=True)
    left = [p for p in harnesses.stdout.split() if p in ours]
    print(f"{how}: workload {workload} gone: {gone}; harness processes left: {left}")
    assert gone and not left
    assert not (work / "results" / "w" / "timeline" / "timeline.sqlite").exists()


def test_two_gpus_run_two_captures_at_once_on_distinct_devices(tmp_path):
    from nsightflow.capture.launch.gpus import visible

    if visible() < 2:  # CUDA_VISIBLE_DEVICES counted: nvidia-smi lists every GPU of the host
        pytest.skip("needs at least two visible GPUs")
    work = copy_workflow(tmp_path / "wf")
    env = _configure(
        work,
        workloads=[
            {
                "name": "mm",
                "callable": "workloads:gpu_matmuls",
                "args": {"n": 4096, "repeats": 20},
                "sweep": {"stage": ["a", "b"]},
            }
        ],
    )
    snakemake(work, "results/report.html", "--cores", "4", "--resources", "gpu=2", env=env)
    spans = {}
    for point in ("a", "b"):
        log = (work / "results" / "mm" / f"stage~{point}" / "logs" / "timeline.log").read_text()
        m = re.search(r"device (\d) of \S+ claimed \(CUDA_VISIBLE_DEVICES=\d\); ran from ([\d.]+) to ([\d.]+)", log)
        assert m, log[-500:]
        spans[point] = (m.group(1), float(m.group(2)), float(m.group(3)))
    print("timeline jobs (device, start, end):", spans)
    (da, sa, ea), (db, sb, eb) = spans["a"], spans["b"]
    assert da != db and sa < eb and sb < ea  # distinct devices, overlapping in time


NVTX_PROGRAM = {"batch": 4, "prompt": 256, "hidden": 1024, "layers": 4, "steps": 4}


def _program_argv(python):
    a = NVTX_PROGRAM
    return [python, "examples/nvtx_program.py"] + [
        x for k in ("batch", "prompt", "hidden", "layers", "steps") for x in (f"--{k}", str(a[k]))
    ]


def test_a_command_with_its_own_nvtx_ranges_matches_a_full_capture_of_them(tmp_path):
    # A program with no nsightflow import, one config entry; the reference: ncu over every launch of its ranges.
    command = {"name": "nvtx_command", "command": _program_argv(sys.executable), "domain": "LLM"}
    results, cmd_s = _run(tmp_path, "command", workloads=[command])
    run = results / "nvtx_command"
    base = tmp_path / "full"
    argv = ncu.reference_argv(
        shutil.which("ncu"),
        base,
        "LLM",
        ["prefill", "decode"],
        ncu_metrics.DEFAULT_METRICS,
        _program_argv(sys.executable),
    )
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    text = subprocess.run(
        ncu_csv.export_argv("ncu", f"{base}.ncu-rep"), capture_output=True, text=True, check=True
    ).stdout
    full, _ = ncu_csv.parse_raw_csv(text)
    truth = _cell_sums(full, full["nvtx_range"])
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    launches = pd.read_csv(run / "kernels.csv").groupby("stage")["instances"].sum()
    manifest = json.loads((run / "manifest.json").read_text())
    every = {"prefill": 1, "decode": NVTX_PROGRAM["steps"]}
    steady = {stage: steady_steps(run, stage, n) for stage, n in every.items()}  # a cold first step is set apart
    assert manifest["stage_domain"] == "LLM" and [s["steps"] for s in manifest["stages"]] == list(steady.values())
    for stage in ("prefill", "decode"):
        f, d, t = truth[stage]  # every step: its steps are alike, so per step against the steady ones'
        f, d, t = (x * steady[stage] / every[stage] for x in (f, d, t))
        mt, md = stages.loc[stage, "flops_tensor_measured"], stages.loc[stage, "dram_bytes_measured"]
        n_full = int((full["nvtx_range"] == stage).sum()) * steady[stage] // every[stage]
        print(
            f"command {stage}: tensor FLOPs {mt:.6g} vs full {t:.6g} ({mt / t - 1:+.3%}); DRAM {md:.6g} vs full "
            f"{d:.6g} ({md / d - 1:+.3%}); launches {launches[stage]} vs {n_full} in the full capture; profiled "
            f"{stages.loc[stage, 'profiled_launches']:.0f}; coverage {stages.loc[stage, 'coverage']:.3f}"
        )
        assert abs(mt / t - 1) < 0.01 and abs(md / d - 1) < 0.01
        assert launches[stage] == n_full and stages.loc[stage, "coverage"] == 1
    # Analytic FLOPs from the model's shapes: 2 linear layers of hidden x 4 hidden per block.
    a = NVTX_PROGRAM
    per_token = 2 * 2 * a["hidden"] * 4 * a["hidden"] * a["layers"]
    assert stages.loc["prefill", "flops_analytic"] == per_token * a["batch"] * a["prompt"]
    assert stages.loc["decode", "flops_analytic"] == per_token * a["batch"] * steady["decode"]
    # The same program as a callable, through the same workflow: the command's cost against it.
    twin = {"name": "nvtx_callable", "callable": "workloads:nvtx_program", "args": NVTX_PROGRAM}
    _, callable_s = _run(tmp_path, "callable", workloads=[twin])
    print(
        f"command workflow {cmd_s:.1f} s, the same program as a callable {callable_s:.1f} s: {cmd_s / callable_s:.2f}x"
    )


def test_a_commands_step_walls_beside_its_nsys_launch_are_the_programs(tmp_path):
    """The command's timeline job runs its timed run beside the nsys launch whose program waits at the hook's gate
    (nsightflow.capture.inside.gate). A launch-bound decode (16 layers of a 256-wide MLP, batch 1): its decode steps'
    wall time so, against the same timed run with nothing beside it, six launches of each, alternating, on one of the
    GPU's CPUs (see test_wall_time_is_the_programs_not_the_profilers: with four launches a side on two CPUs, the arm
    alone missed the fast state in every launch, 1.35 ms against 0.80 ms); each side's fast steps (its 10th
    percentile: the single fastest step of 96 was the host's noise, -5.0% to +7.1% in five runs whose medians agreed
    within 3.5%), and each launch beside against the launches alone on either side of it (seven alone, six beside,
    in turns): the median of their ratios. A pool of each side's steps read the host's drift between launches as a
    difference (its medians -6.6% to +7.2% in runs whose fast steps agreed within 3%), as the serving test found of
    its runs."""
    from nsightflow.capture.launch import command
    from nsightflow.capture.launch.command_call import CommandCall
    from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings

    a = {"batch": 1, "prompt": 16, "hidden": 256, "layers": 16, "steps": 16}
    argv = [sys.executable, "examples/nvtx_program.py"]
    argv += [x for k in ("batch", "prompt", "hidden", "layers", "steps") for x in (f"--{k}", str(a[k]))]
    call = CommandCall(command=argv, domain="LLM")
    cpus = _gpu_local_cpus()[2:3] or _gpu_local_cpus()
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    alone, beside, spans, launches = [], [], [], []
    try:
        for i in range(13):
            out = tmp_path / str(i)
            out.mkdir()
            t0 = time.monotonic()
            if i % 2 == 0:
                found, _ = command._timed(call, str(out), out / "log", 300)
                launches.append(found.walls["decode"])
                alone += launches[-1]
            else:
                outputs = ProfileOutputs.of(out / "m.json", out / "f.json", out / "c.json", out / "log")
                nsys_bin = shutil.which("nsys") or "nsys"
                run = RunSettings({}, {}, 300)
                command.timeline(nsys_bin, call, out / "t.nsys-rep", out / "t.sqlite", outputs, run)
                launches.append(json.loads((out / "m.json").read_text())["program_wall_s"]["decode"])
                beside += launches[-1]
            spans.append(time.monotonic() - t0)
    finally:
        os.sched_setaffinity(0, before)
    ref, got = np.percentile(alone, 10), np.percentile(beside, 10)
    each = [np.median(launches[i]) / np.mean([np.median(launches[i - 1]), np.median(launches[i + 1])]) - 1
            for i in range(1, len(launches), 2)]  # fmt: skip
    paired = float(np.median(each))
    print(
        f"launch-bound command decode step, 7 launches alone and 6 beside, 16 steps each, on CPUs {cpus}: timed "
        f"alone 10th percentile {ref * 1e3:.3f} ms (fastest {min(alone) * 1e3:.3f}, median "
        f"{np.median(alone) * 1e3:.3f}); "
        f"timed beside the gated nsys launch {got * 1e3:.3f} ms (fastest {min(beside) * 1e3:.3f}, median "
        f"{np.median(beside) * 1e3:.3f}; {got / ref - 1:+.1%}, medians {np.median(beside) / np.median(alone) - 1:+.1%}"
        f"); each launch beside against its neighbours alone {[f'{x:+.1%}' for x in each]} (median {paired:+.1%}); "
        f"timed run alone {np.median(spans[0::2]):.1f} s, timeline job (both launches) {np.median(spans[1::2]):.1f} s"
    )
    # Slower beside the gated launch is the failure this test is for: its fast steps within 5% above those alone;
    # faster is the host's noise, so each launch beside agrees with its neighbours alone within 5% either way (the
    # median of the six: the same clock both sides).
    assert got / ref - 1 < 0.05
    assert abs(paired) < 0.05


def _ran_s(log):
    """Seconds the profiler of a job ran, from the '[nsightflow] ... ran from A to B' line of its log."""
    m = re.search(r"ran from ([0-9.]+) to ([0-9.]+)", log.read_text())
    return float(m.group(2)) - float(m.group(1))


def test_cards_of_the_top_classes_come_from_a_capture_of_those_launches(tmp_path):
    wl = [{"name": "small", "callable": "nsightflow.workloads.decoder:build", "args": SMALL}]
    results, seconds = _run(tmp_path, "deep", wl, ncu={"deep_dive": 2})
    run = results / "small"
    plan = json.loads((run / "deep.plan.json").read_text())
    deep = [e for e in plan["expected"] if e["role"] == "deep"]
    found = json.loads((run / "cards.json").read_text())["cards"]
    assert [(c["stage"], c["class_key"]) for c in found] == [(e["stage"], e["class_key"]) for e in deep]
    assert {s: sum(e["stage"] == s for e in deep) for s in ("prefill", "decode")} == {"prefill": 2, "decode": 2}
    raw, _ = ncu_csv.parse_raw_csv((run / "ncu" / "deep.raw.csv").read_text())
    assert len(raw) == len(plan["expected"])  # the capture profiled its plan and nothing else
    rows = [i for i, e in enumerate(plan["expected"]) if e["role"] == "deep"]
    for c, i in zip(found, rows, strict=True):
        assert c["sol_compute_pct"] == pytest.approx(
            float(raw.iloc[i]["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
        )
        assert c["occupancy_pct"] == pytest.approx(
            float(raw.iloc[i]["sm__warps_active.avg.pct_of_peak_sustained_active"])
        )
    page = (run / "report.html").read_text()
    assert "Top kernel classes, in depth" in page
    deep_s, main_s = _ran_s(run / "logs" / "ncu_deep.log"), _ran_s(run / "logs" / "ncu_capture.log")
    for c in found:
        print(
            f"card {c['stage']} {c['kernel'][:50]}: {c['limiter']}, SOL compute {c['sol_compute_pct']:.1f}%, memory "
            f"{c['sol_memory_pct']:.1f}%, occupancy {c['occupancy_pct']:.1f}%, {len(c['rules'])} rule messages"
        )
    print(
        f"deep dive: {len(raw)} launches ({len(deep)} cards) in {deep_s:.1f} s; the main capture {main_s:.1f} s; "
        f"workflow {seconds:.1f} s"
    )


RANKS_ARGS = ["--hidden", "1024", "--layers", "2", "--batch", "4", "--tokens", "256", "--steps", "3"]
RANK_STAGES = {
    "tensor": ("LLM", ["prefill", "decode"]),
    "data": ("train", ["forward", "backward", "optimizer"]),
    "callable": ("nsightflow.callable", ["forward"]),  # nsightflow.capture.inside.runner's ranges (config nprocs)
}


def _torchrun(parallel, python=sys.executable, model="mlp"):
    job = ["examples/ranks_program.py", "--parallel", parallel, "--model", model, *RANKS_ARGS]
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *job]


def _rank_reference(tmp_path, parallel, stages, model="mlp"):
    """ncu over every launch (NCCL's left out, as nsightflow leaves them) of ``stages`` in every rank of the job: the
    full capture; its results by rank (each rank prints its pid) and stage."""
    domain = RANK_STAGES[parallel][0]
    base = tmp_path / f"full_{parallel}_{model}"
    program = _torchrun(parallel, model=model)
    argv = ncu.reference_argv(shutil.which("ncu"), base, domain, stages, ncu_metrics.DEFAULT_METRICS, program)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # torchrun's logs (torchelastic_*) stay in the test's folder
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=560, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ranks = {int(p): int(r) for r, p in re.findall(r"rank (\d+) of \d+ \(pid (\d+)\)", out.stdout + out.stderr)}
    text = subprocess.run(
        ncu_csv.export_argv("ncu", f"{base}.ncu-rep"), capture_output=True, text=True, check=True
    ).stdout
    full, _ = ncu_csv.parse_raw_csv(text)
    full["rank"] = full["Process ID"].astype(int).map(ranks)
    return full


def _check_ranks(run, parallel, reference, profiled_rank=0):
    """Every kernel of every rank attributed (against plain SQL), communication split, and the profiled rank's
    measured stages within 1% of the full capture of that rank's stages."""
    domain, stages = RANK_STAGES[parallel]
    manifest = json.loads((run / "manifest.json").read_text())
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1] and manifest["profiled_rank"] == profiled_rank
    table = pd.DataFrame(json.loads((run / "summary.json").read_text())["ranks"])
    csv = pd.read_csv(run / "ranks.csv")  # the same rows, for pandas
    assert csv[["rank", "stage", "launches"]].values.tolist() == table[["rank", "stage", "launches"]].values.tolist()
    # the table's kernels are of the steps its walls are (the steady ones)
    sql = steady_rows(sql_rank_kernels(run / "timeline" / "timeline.sqlite", domain), manifest.get("warmup_steps", []))
    for _, row in table.iterrows():
        held = sql[(sql["pid"] == row["pid"]) & (sql["stage"] == row["stage"])]
        n, comm = len(held), int(held["kernel"].str.startswith("nccl").sum())
        print(
            f"{parallel} rank {row['rank']} {row['stage']}: launches {row['launches']} (SQL {n}), comm "
            f"{row['comm_launches']} (SQL {comm}), wall {row['wall_ms']:.3f} ms, busy {row['gpu_busy_ms']:.3f}, comm "
            f"{row['comm_ms']:.3f} ms of which exposed {row['comm_exposed_ms']:.3f}, waiting "
            f"{row['comm_wait_ms']:.3f}, slowest {row['slowest']}"
        )
        assert 0 <= row["comm_wait_ms"] <= row["comm_ms"] + 1e-9  # each collective's time beyond its shortest rank's
        assert (row["launches"], row["comm_launches"]) == (n, comm)
        assert row["comm_overlapped_ms"] + row["comm_exposed_ms"] == pytest.approx(row["comm_ms"])
        assert row["comm_exposed_ms"] == pytest.approx(exposed_by_hand(held) / 1e6)
    st = pd.read_csv(run / "stages.csv").set_index("stage")
    mine = reference[reference["rank"] == profiled_rank]
    truth = _cell_sums(mine, mine["nvtx_range"])

    def near(got, want):
        return got == want == 0 or abs(got / want - 1) < 0.01

    for stage in [s for s in stages if s in truth]:
        f, d, t = truth[stage]
        mt, md = st.loc[stage, "flops_tensor_measured"], st.loc[stage, "dram_bytes_measured"]
        mf = st.loc[stage, "flops_measured"]  # with the FMA units' FLOPs, where they were collected (float32)
        row = table[(table["rank"] == profiled_rank) & (table["stage"] == stage)].iloc[0]
        n_full = int((mine["nvtx_range"] == stage).sum())
        print(
            f"{parallel} rank {profiled_rank} {stage}: tensor FLOPs {mt:.6g} vs full {t:.6g}; all FLOPs {mf:.6g} vs "
            f"full {f:.6g}; DRAM {md:.6g} vs full {d:.6g} ({md / d - 1:+.3%}); launches "
            f"{row['launches'] - row['comm_launches']} vs {n_full}; coverage {st.loc[stage, 'coverage']:.4f}"
        )
        assert near(mt, t) and near(md, d) and (not np.isfinite(mf) or near(mf, f))
        assert row["launches"] - row["comm_launches"] == n_full and st.loc[stage, "coverage"] == 1


def test_two_ranks_on_one_gpu_report_per_rank_stages(tmp_path, monkeypatch):
    # Two tensor-parallel ranks sharing one GPU, talking over gloo; rank 0 captured. The GPU is the first this test
    # run may use (a run given GPUs 2 and 3 of a host has CUDA_VISIBLE_DEVICES=2,3), never device 0 of the host,
    # which another run may hold; the run's own setting is back as it was for the tests after this one.
    one = _first_gpu()
    job = {"name": "tp1", "command": _torchrun("tensor"), "env": {"CUDA_VISIBLE_DEVICES": one}}
    job["warmup_steps"] = 0  # the reference counts every step's launches
    results, seconds = _run(tmp_path, "ranks_one_gpu", workloads=[job])
    print(f"two ranks on one GPU (device {one}): workflow {seconds:.1f} s")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", one)
    reference = _rank_reference(tmp_path, "tensor", ["prefill", "decode"])
    _check_ranks(results / "tp1", "tensor", reference)


def test_a_callable_as_two_processes_on_one_gpu_matches_a_full_capture(tmp_path):
    # config nprocs: 2 runs the callable under torchrun (nsightflow.capture.inside.runner), two ranks on one GPU over
    # gloo;
    # rank 1 captured; against ncu over every launch of both ranks' stage ranges, run the same way.
    from nsightflow.capture.inside.runner import ARGS_ENV, DOMAIN

    args = {"hidden": 1024, "tokens": 128, "steps": 3, "device": "cuda", "dtype": "bfloat16"}
    job = {"name": "np", "callable": "workloads:ranks_matmul", "nprocs": 2, "rank": 1, "args": args}
    results, seconds = _run(tmp_path, "nprocs", workloads=[job])
    print(f"a callable as two processes on one GPU: workflow {seconds:.1f} s")
    program = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    program += ["-m", "nsightflow.capture.inside.runner", "--callable", "workloads:ranks_matmul"]
    base = tmp_path / "full_nprocs"
    argv = ncu.reference_argv(shutil.which("ncu"), base, DOMAIN, ["forward"], ncu_metrics.DEFAULT_METRICS, program)
    env = {**os.environ, ARGS_ENV: json.dumps(args), "PYTHONPATH": str(ROOT / "tests"), "TMPDIR": str(tmp_path)}
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ranks = {int(p): int(r) for r, p in re.findall(r"rank (\d+) of \d+ \(pid (\d+)\)", out.stdout + out.stderr)}
    text = subprocess.run(
        ncu_csv.export_argv("ncu", f"{base}.ncu-rep"), capture_output=True, text=True, check=True
    ).stdout
    full, _ = ncu_csv.parse_raw_csv(text)
    full["rank"] = full["Process ID"].astype(int).map(ranks)
    _check_ranks(results / "np", "callable", full, profiled_rank=1)
    st = pd.read_csv(results / "np" / "stages.csv").set_index("stage")
    model = 2 * args["tokens"] * args["hidden"] ** 2 * args["steps"]
    print(f"analytic FLOPs {st.loc['forward', 'flops_analytic']:.6g}, model 2·tokens·hidden²·steps {model:.6g}")
    assert st.loc["forward", "flops_analytic"] == model


def test_interrupting_a_job_of_ranks_under_ncu_leaves_none_behind(tmp_path):
    # Two ranks on the GPU; each sleeps inside its stage range in the ncu capture's launch (the hook's mode says which
    # launch it is), where Ctrl-C reaches the workflow: no rank, launcher or ncu may outlive it.
    import signal

    marks = tmp_path / "marks"
    marks.mkdir()
    script = slow_ranks_script(tmp_path / "slow_ranks.py", marks, mode="ncu", device="cuda")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    work = copy_workflow(tmp_path / "wf")
    proc = foreground_workflow(work, _configure(work, workloads=[{"name": "slow", "command": command}]))
    deadline = time.time() + 300
    while len(list(marks.iterdir())) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    pids = [int(p.read_text()) for p in marks.iterdir()]
    assert len(pids) == 2, f"the ranks did not reach the ncu launch (workflow exit {proc.poll()})"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the foreground group
    proc.wait(timeout=120)
    gone = wait_gone(pids)
    left = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout.split()
    print(f"ranks {pids} interrupted under ncu: all gone {gone}; processes of the script left {left}")
    for pid in left:  # what holds a rank that outlived its job (its state, parent and the parent's command)
        status = dict(ln.split(":\t", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in ln)
        parent = Path(f"/proc/{status['PPid'].strip()}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
        print(f"  {pid}: state {status['State'].strip()}, parent {status['PPid'].strip()} {parent!r}")
    if left:
        log = (work / "results" / "slow" / "logs" / "ncu_capture.log").read_text()
        print("the job's log ends:", "\n".join(ln for ln in log.splitlines()[-12:] if "[nsightflow]" in ln))
    assert gone and not left


def test_nccl_ranks_on_two_gpus_report_communication_and_capture_without_deadlock(tmp_path):
    from nsightflow.capture.launch.gpus import visible

    if visible() < 2:  # CUDA_VISIBLE_DEVICES counted: nvidia-smi lists every GPU of the host
        pytest.skip("needs at least two visible GPUs")
    jobs = [
        {"name": "dp", "command": _torchrun("data"), "gpus": 2, "warmup_steps": 0},
        {"name": "tp", "command": _torchrun("tensor"), "gpus": 2, "warmup_steps": 0},
        {"name": "tp_rank1", "command": _torchrun("tensor"), "gpus": 2, "warmup_steps": 0, "rank": 1},
        {
            "name": "dp_llama",
            "command": _torchrun("data", model="llama"),
            "gpus": 2,
            "warmup_steps": 0,
        },  # HuggingFace Llama, DDP
    ]
    results, seconds = _run(tmp_path, "ranks_two_gpus", workloads=jobs)
    print(f"four NCCL jobs of two ranks: workflow {seconds:.1f} s")
    # Backward's kernels come from autograd's thread, outside the NVTX range ncu filters on: not in the reference.
    dp_ref = _rank_reference(tmp_path, "data", ["forward", "optimizer"])
    _check_ranks(results / "dp", "data", dp_ref)
    tp_ref = _rank_reference(tmp_path, "tensor", ["prefill", "decode"])
    _check_ranks(results / "tp", "tensor", tp_ref)
    _check_ranks(results / "tp_rank1", "tensor", tp_ref, profiled_rank=1)
    llama_ref = _rank_reference(tmp_path, "data", ["forward", "optimizer"], model="llama")
    _check_ranks(results / "dp_llama", "data", llama_ref)
    dp = pd.DataFrame(json.loads((results / "dp" / "summary.json").read_text())["ranks"]).set_index(["rank", "stage"])
    tp = pd.DataFrame(json.loads((results / "tp" / "summary.json").read_text())["ranks"]).set_index(["rank", "stage"])
    assert dp.loc[(0, "backward"), "comm_launches"] > 0 and tp.loc[(0, "decode"), "comm_launches"] > 0
    assert set(tp["device"]) == {"cuda:0", "cuda:1"}


COMPILED = {"steps": 12, "hidden": 2048, "batch": 64}


def _compiled_argv(python, steps=COMPILED["steps"]):
    argv = [python, "tests/programs/compiled_steps.py", "--backend", "inductor", "--mode", "reduce-overhead"]
    return argv + [x for k, v in {**COMPILED, "steps": steps}.items() for x in (f"--{k}", str(v))]


def test_a_compiled_command_runs_its_compiled_kernels_as_a_plain_nsys_run_does(tmp_path):
    """torch.compile(mode='reduce-overhead', fullgraph=True), as gpt-fast's --compile: under nsightflow the same
    kernels per steady step as a plain `nsys profile` of the same command (Triton kernels, CUDA-graph replays), its
    compile and graph-recording steps set apart, its FLOPs from its shapes, and its measured FLOPs and DRAM bytes
    against ncu over every launch of its ranges."""
    python = sys.executable
    results, seconds = _run(tmp_path, "compiled", workloads=[{"name": "compiled", "command": _compiled_argv(python)}])
    run = results / "compiled"
    manifest = json.loads((run / "manifest.json").read_text())
    apart = [w["step"] for w in manifest["warmup_steps"]]
    print(f"compiled command: workflow {seconds:.1f} s; set apart {manifest['warmup_steps']}")
    assert apart[:1] == [0] and "torch.compile made" in manifest["warmup_steps"][0]["why"]
    # the counters ncu started with before its plan existed were the plan's (its compiled GEMMs are whole-step
    # windows' launches, which take the stage's count): ncu started once
    assert "ncu started again" not in (run / "logs" / "ncu_capture.log").read_text()
    steady = COMPILED["steps"] - len(apart)
    # The plain run: nsys alone, no hook, no nsightflow in the process; its decode ranges in order (no payload).
    plain = kernels_per_range(plain_nsys(_compiled_argv(python), tmp_path / "plain", ROOT), "LLM", "decode")
    assert len(plain) == COMPILED["steps"]
    mine = sql_launches(run / "timeline" / "timeline.sqlite")
    mine = mine[mine["stage"] == "decode"]
    for step in range(len(apart), COMPILED["steps"]):
        theirs, ours = plain[step], mine[mine["step"] == step]
        assert Counter(ours["kernel"]) == Counter(theirs["kernel"]), f"step {step}"
        assert ours["graph"].sum() == theirs["graph"].sum() > 0  # replayed from a CUDA graph in both
    assert any(k.startswith("triton_") for k in mine["kernel"])  # compiled kernels, not the eager twin's
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert int(stages.loc["decode", "range_instances"]) == steady
    h, b = COMPILED["hidden"], COMPILED["batch"]
    assert stages.loc["decode", "flops_analytic"] == 2 * (2 * b * h * 4 * h) * steady
    # ncu over every launch of every decode range; the steady steps are the last ones, each of the same launches.
    base = tmp_path / "full"
    # the capture's own metric list: which counters share a replay pass changes what DRAM bytes a pass sees (a
    # kernel's writes still in L2 when it ends are written back between passes, outside every kernel's counters)
    cmd = json.loads((run / "ncu" / "capture.cmd.json").read_text())["argv"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    argv = ncu.reference_argv(shutil.which("ncu"), base, "LLM", ["decode"], metrics, _compiled_argv(python))
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    text = subprocess.run(
        ncu_csv.export_argv("ncu", f"{base}.ncu-rep"), capture_output=True, text=True, check=True
    ).stdout
    full, _ = ncu_csv.parse_raw_csv(text)
    per_step = len(mine) // steady
    tail = full.iloc[len(full) - per_step * steady :]
    tensor = [c for c in tail.columns if c.startswith("sm__ops_path_tensor_src_") and c.endswith(".sum")]
    t = float(tail[tensor].to_numpy(dtype=float).sum())
    d = float((tail["dram__bytes_read.sum"] + tail["dram__bytes_write.sum"]).sum())
    mt, md = stages.loc["decode", "flops_tensor_measured"], stages.loc["decode", "dram_bytes_measured"]
    print(
        f"compiled decode, {steady} steady steps of {per_step} launches: tensor FLOPs {mt:.6g} vs ncu over every "
        f"launch {t:.6g} ({mt / t - 1:+.3%}); DRAM {md:.6g} vs {d:.6g} ({md / d - 1:+.3%}); profiled "
        f"{stages.loc['decode', 'profiled_launches']:.0f}"
    )
    # Steady walls against the program's own step times, printed by the same timed run (the first lines in the log).
    log = (run / "logs" / "timeline.log").read_text().splitlines()
    own = [float(line.split()[1]) for line in log if re.fullmatch(r"step \d+\.\d+", line)][: COMPILED["steps"]]
    ours = manifest["program_wall_s"]["decode"]
    theirs = statistics.median(own[len(apart) :])
    ratio = statistics.median(ours) / theirs
    print(f"steady decode wall per step: ours {statistics.median(ours) * 1e3:.4f} ms, the program's own "
          f"{theirs * 1e3:.4f} ms ({ratio - 1:+.2%}); its own every step {own}")  # fmt: skip
    dram = tail["dram__bytes_read.sum"] + tail["dram__bytes_write.sum"]
    by_position = dram.groupby(np.arange(len(tail)) % per_step).agg(["mean", "min", "max"])
    names = tail["Kernel Name"].iloc[:per_step].str[:40].tolist()
    places = list(zip(names, by_position.values.tolist(), strict=True))
    print(f"ncu over every launch, DRAM bytes per launch by position in the step (mean, min, max): {places}")
    print(f"ncu over every launch, DRAM MB per steady step: {(dram.to_numpy() / 1e6).round(3).reshape(steady, -1)}")
    windowed = pd.concat([ncu_csv.parse_raw_csv(f)[0] for f in sorted((run / "ncu").glob("*.raw.csv"))])
    both = windowed[list(ncu_csv.DRAM_BYTES)].values.tolist()
    print(f"windowed reads, writes: {list(zip(windowed['Kernel Name'].str[:40], both, strict=True))}")
    # Every sampled step holds the step's whole launch sequence: its bytes scaled to the steady steps.
    scale = steady / (len(windowed) / per_step)
    reads, writes = (float(windowed[c].sum()) * scale for c in ncu_csv.DRAM_BYTES)
    full_reads, full_writes = (float(tail[c].sum()) for c in ncu_csv.DRAM_BYTES)
    print(f"DRAM reads {reads:.6g} vs ncu over every launch {full_reads:.6g} ({reads / full_reads - 1:+.3%}); writes "
          f"{writes:.6g} vs {full_writes:.6g}")  # fmt: skip
    assert len(own) == COMPILED["steps"] and abs(ratio - 1) < 0.05
    assert abs(mt / t - 1) < 0.01
    # The stage's DRAM bytes are its sampled launches' reads and writes, scaled; the reads (a GEMM's weights, read
    # once) within 1% of ncu over every launch. A launch's writes are the bytes L2 wrote back while it ran: ncu saw
    # the same GEMM write 5 KB to 120 KB or 0.75 to 1.0 MB of its 1-MB output, the larger state only after several
    # steps of continuous profiling, and two captures of every launch a minute apart differ by 1.2% in all
    # (benchmarks/ncu_dram_spread.py, docs/benchmarks.md); the total differs from the reference by at most its writes.
    assert md == pytest.approx(reads + writes, rel=1e-6)
    assert abs(reads / full_reads - 1) < 0.01 and abs(md - d) <= 0.01 * d + full_writes


NO_RANGES = {"steps": 6, "accum": 2, "hidden": 1024, "batch": 512, "eval-every": 3, "eval-batches": 2}


def test_a_compiled_training_script_without_ranges_is_profiled_by_its_iterations(tmp_path):
    """A training loop with no NVTX range, its model compiled (inductor): its iterations (optimizer steps) and its
    evaluation calls are the stages, measured compiled (Triton kernels in the iterations), and ncu's tensor FLOPs of
    the sampled iterations equal the MLP's matmuls (bf16, every dimension a multiple of 128: no padding)."""
    argv = [sys.executable, "tests/programs/no_ranges.py", "--mode", "train", "--compile", "--backend", "inductor"]
    argv += [x for k, v in NO_RANGES.items() for x in (f"--{k}", str(v))]
    results, seconds = _run(tmp_path, "no_ranges", workloads=[{"name": "no_ranges", "command": argv}])
    run = results / "no_ranges"
    manifest = json.loads((run / "manifest.json").read_text())
    h, b = NO_RANGES["hidden"], NO_RANGES["batch"]
    evaluation = f"inference {b}x{h}"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    print(
        f"no-range training: workflow {seconds:.1f} s; stages {stages.index.tolist()}; apart {manifest['warmup_steps']}"
    )
    print(stages[["range_instances", "flops_analytic", "flops_tensor_measured", "wall_ms", "gpu_busy_ms"]].to_string())
    assert manifest["stage_domain"] == "nsightflow.auto" and set(stages.index) == {"iteration", evaluation}
    iterations = steady_steps(run, "iteration", NO_RANGES["steps"])
    mm = 2 * b * h * 4 * h
    analytic = iterations * NO_RANGES["accum"] * 5 * mm  # forward 2 matmuls, backward 3 (no input gradient first)
    assert stages.loc["iteration", "flops_analytic"] == analytic
    measured = stages.loc["iteration", "flops_tensor_measured"]
    print(
        f"iteration tensor FLOPs measured {measured:.6g} vs the shapes' {analytic:.6g} ({measured / analytic - 1:+.3%})"
    )
    assert abs(measured / analytic - 1) < 0.01
    kernels = sql_launches(run / "timeline" / "timeline.sqlite")
    assert any(k.startswith("triton_") for k in kernels.loc[kernels["stage"] == "iteration", "kernel"])


def test_stage_ranges_in_a_worker_thread_on_the_gpu(tmp_path):
    """Steps run in a worker thread (a server's loop): under torch.profiler (started and stopped on that thread) and
    under nsys and ncu, every steady step's matmul is measured: 2·n³ tensor FLOPs each."""
    steps, n = 6, 2048
    argv = [sys.executable, "tests/programs/threaded_steps.py", "--steps", str(steps), "--n", str(n)]
    for profiler in ("torch", "nsight"):
        results, seconds = _run(
            tmp_path, f"threaded_{profiler}", workloads=[{"name": "threaded", "command": argv}], profiler=profiler
        )
        run = results / "threaded"
        decode = steady_steps(run, "decode", steps)
        stages = pd.read_csv(run / "stages.csv").set_index("stage")
        kernels = pd.read_csv(run / "kernels.csv")
        print(f"threaded, {profiler}: {seconds:.1f} s; {stages.loc['decode'].to_dict()}")
        assert stages.loc["decode", "flops_analytic"] == decode * 2 * n**3
        assert stages.loc["decode", "gpu_busy_ms"] > 0 and not kernels["kernel"].str.startswith("aten::").any()
        if profiler == "nsight":
            assert stages.loc["decode", "flops_tensor_measured"] == decode * 2 * n**3


def test_a_trainer_script_as_a_command_matches_its_own_count_and_every_launch(tmp_path):
    """The Trainer script of test_trainer.py on the GPU (bf16), from its own folder: GEMM FLOPs per step within 1% of
    the Trainer's own total_flos per step, and tensor FLOPs and DRAM bytes within 1% of nsightflow's capture of
    every launch of the same steps (autograd's backward thread included, which an NVTX-filtered ncu would miss)."""
    from test_trainer import STEPS, trainer_workload

    workload, out = trainer_workload(tmp_path / "a")
    steps = {"sample_steps": ["first", "last"]}
    results, seconds = _run(tmp_path / "a", "trainer", [workload], ncu=steps)
    reference, _ = trainer_workload(tmp_path / "b")
    full, full_s = _run(tmp_path / "b", "trainer_full", [reference], ncu={**steps, "capture": "every_launch"})
    st = pd.read_csv(results / "trainer" / "stages.csv").set_index("stage").loc["train_step"]
    ref = pd.read_csv(full / "trainer" / "stages.csv").set_index("stage").loc["train_step"]
    theirs = json.loads(out.read_text())
    n = steady_steps(results / "trainer", "train_step", STEPS)
    ours, per_step = st["flops_analytic_gemm"] / n, theirs["total_flos"] / theirs["steps"]
    t, rt, d, rd = (
        st["flops_tensor_measured"],
        ref["flops_tensor_measured"],
        st["dram_bytes_measured"],
        ref["dram_bytes_measured"],
    )
    print(
        f"Trainer ({seconds:.1f} s, every launch {full_s:.1f} s): GEMM FLOPs a step {ours:.6g} vs total_flos "
        f"{per_step:.6g} ({ours / per_step - 1:+.3%}); tensor {t:.6g} vs {rt:.6g} ({t / rt - 1:+.3%}); DRAM "
        f"{d:.6g} vs {rd:.6g} ({d / rd - 1:+.3%})"
    )
    assert abs(ours / per_step - 1) < 0.01
    assert abs(t / rt - 1) < 0.01 and abs(d / rd - 1) < 0.01 and st["coverage"] == 1.0


def test_shared_and_routed_experts_and_a_sliding_window_on_the_gpu(tmp_path):
    """Issue 45's corpus beyond Mixtral: a Qwen2-MoE (shared expert beside top-k routed ones) and a DeepSeek-V3 shape
    (latent attention, a dense first layer, routed and shared experts) from configs, bf16, and compiled flex attention
    with a causal sliding window: analytic FLOPs against counts from their shapes (tests/test_workloads.py's), measured
    tensor FLOPs and DRAM bytes against nsightflow's capture of every launch of the same steps."""
    from test_workloads import DEEPSEEK, QWEN_MOE, deepseek_gemm, moe_gemm, qwen_moe_macs

    hf = {"batch": 1, "prompt": 512, "decode_steps": 3, "dtype": "bfloat16"}
    b, heads, seq, dh, w = 4, 16, 2048, 64, 256
    workloads = [
        {"name": "qwen_moe", "callable": "nsightflow.workloads.hf:build", "args": {**hf, "config": QWEN_MOE}},
        {"name": "deepseek", "callable": "nsightflow.workloads.hf:build", "args": {**hf, "config": DEEPSEEK}},
        {"name": "window", "callable": "workloads:flex_causal", "args": {"window": w}},
    ]
    steps = {"sample_steps": ["first", "last"]}
    results, seconds = _run(tmp_path, "more_moe", workloads, ncu=steps)
    full, full_s = _run(tmp_path, "more_moe_full", workloads, ncu={**steps, "capture": "every_launch"})
    print(f"\nmore MoE and a window: representatives {seconds:.1f} s, every launch {full_s:.1f} s")
    h = QWEN_MOE["hidden_size"]
    kept = b * heads * (w * (w + 1) // 2 + (seq - w) * w)  # query i keeps min(i + 1, w) keys
    expected = {
        ("qwen_moe", "prefill", "flops_analytic_gemm"): moe_gemm(qwen_moe_macs(QWEN_MOE), 1, 512, h, 512),
        ("qwen_moe", "decode", "flops_analytic_gemm"): 3 * moe_gemm(qwen_moe_macs(QWEN_MOE), 1, 1, h, 512),
        ("deepseek", "prefill", "flops_analytic_gemm"): deepseek_gemm(DEEPSEEK, 1, 512, 0),
        ("deepseek", "decode", "flops_analytic_gemm"): sum(deepseek_gemm(DEEPSEEK, 1, 1, 512 + s) for s in range(3)),
        ("window", "attention", "flops_analytic_causal"): 2 * 2 * dh * kept,
    }
    for (name, stage, col), want in expected.items():
        st = pd.read_csv(results / name / "stages.csv").set_index("stage").loc[stage]
        ref = pd.read_csv(full / name / "stages.csv").set_index("stage").loc[stage]
        t, rt = st["flops_tensor_measured"], ref["flops_tensor_measured"]
        d, rd = st["dram_bytes_measured"], ref["dram_bytes_measured"]
        print(
            f"{name} {stage}: analytic {st[col]:.6g} vs shapes {want:.6g} ({st[col] / want - 1:+.3%}); tensor FLOPs "
            f"{t:.6g} vs every launch {rt:.6g} ({t / rt - 1:+.3%}); DRAM {d / rd - 1:+.3%}"
        )
        assert abs(st[col] / want - 1) < 0.01 and st["coverage"] == 1.0
        assert t > 0 and abs(t / rt - 1) < 0.01 and abs(d / rd - 1) < 0.01
