"""The capture engine on real H200 runs (tests/data/h200_v2, one workflow run each, trimmed): attribution across
threads and CUDA graphs, one profiled launch per class, and scaled numbers checked against independent
measurements made in the same GPU session (a full capture, an eager run, range replay)."""

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA, DEFAULT_FOCUS, aggregate_recorded, sql_launches

from nsightflow import ncu_metrics, precisions
from nsightflow.analysis import aggregate, diagnostics, metrics, steps
from nsightflow.capture.read import attribution, matching, ncu_csv, plan
from nsightflow.records import CaptureRecord, Diagnostic, Manifest, Summary

V2 = DATA / "h200_v2"
V3 = DATA / "h200_v3"  # runs whose captures collected only the FLOP counters their workloads need


def _agg(run, root=V2, **kw):
    d = root / run
    # Captures recorded before manifests named MFU's precision: these workloads declared their dtype.
    precision = precisions.tensor_precision(json.loads((d / "manifest.json").read_text())["dtype"], tf32=False)
    return aggregate_recorded(
        d,
        precision,
        **kw,
    )


def _sums(raw):
    """FLOPs (tensor pipes + SASS, FMA = 2) and DRAM bytes per NVTX range, straight from an export's cells."""
    sass = {"fadd": 1, "fmul": 1, "ffma": 2, "dadd": 1, "dmul": 1, "dfma": 2, "hadd": 2, "hmul": 2, "hfma": 4}
    flops = sum(raw[m] for m in ncu_metrics.TENSOR_FLOP_METRICS.values())
    flops = flops + sum(k * raw[f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"] for op, k in sass.items())
    dram = raw["dram__bytes_read.sum"] + raw["dram__bytes_write.sum"]
    return pd.DataFrame({"flops": flops, "dram": dram, "stage": raw["nvtx_range"]}).groupby("stage").sum()


def _replanned(run):
    """Today's plan of a recorded run, and the recorded capture's results for it: today's plan profiles a subset of
    the launches the GPU host profiled (a call profiled in an earlier step is not profiled again), in order."""
    d = V2 / run
    tl = attribution.read_timeline(d / "timeline.sqlite", "nsightflow")
    now = plan.plan_capture(tl, "nsightflow", ["first", "last"], "representatives")
    ran = plan.CapturePlan.read(d / "plan.json")
    raw, _ = ncu_csv.parse_raw_csv(d / "capture.raw.csv")
    key = ("stage", "step", "unit", "class_key", "mangled", "grid", "block")
    keep, j = [], 0
    for i, e in enumerate(ran.expected):
        if j < len(now.expected) and all(getattr(e, k) == getattr(now.expected[j], k) for k in key):
            keep.append(i)
            j += 1
    assert j == len(now.expected), "today's plan is not a subsequence of the plan the GPU host ran"
    return tl, now, ran, raw.iloc[keep].reset_index(drop=True)


def _agg_replanned(run, tl, now, results, root=V2):
    d = root / run
    matched = matching.match_to_plan(ncu_csv.result_metrics(results), plan.expected_frame(now), "capture")
    pk = aggregate.peaks_for(matched, tl.gpu_name, "bf16", None)
    analytic = aggregate.load_analytic(d / "analytic_flops.json")
    return aggregate.tables(tl, matched, plan.chosen_pairs(now), analytic, pk, DEFAULT_FOCUS)[2].set_index("stage")


def test_representatives_agree_with_a_full_capture_of_the_same_stages():
    # small/full.raw.csv: ncu over every launch of both stages (358), in the same GPU session.
    full, _ = ncu_csv.parse_raw_csv(V2 / "small" / "full.raw.csv")
    truth = _sums(full)
    st = _agg("small").stages.set_index("stage")
    tl, now, _, results = _replanned("small")
    today = _agg_replanned("small", tl, now, results)
    for stage in ("prefill", "decode"):
        for got in (st, today):
            assert got.loc[stage, "flops_measured"] == pytest.approx(truth.loc[stage, "flops"], rel=1e-3)
            assert got.loc[stage, "dram_bytes_measured"] == pytest.approx(truth.loc[stage, "dram"], rel=1e-2)
            assert got.loc[stage, "coverage"] == 1.0
    # ... from 70 profiled launches (28 prefill classes; 21 in each of decode steps 0 and 3) instead of 358, and
    # today from 50: decode step 3 profiles only its attention, the one call whose shapes grow with the step.
    assert st["profiled_launches"].sum() == 70 and len(full) == 358
    assert today["profiled_launches"].to_dict() == {"prefill": 28, "decode": 22}
    assert len(results) == 50


def test_a_call_profiled_in_one_step_is_not_profiled_again():
    tl, now, ran, _ = _replanned("default")
    probe = tl.launches[tl.launches["pass_"] == "probe"]
    # Independently of the planner: the calls (signature, ordinal, kernel key) the probe pass made in decode steps
    # 0 and 7, from the timeline's launches.
    step = {s: set(probe[(probe["stage"] == "decode") & (probe["step"] == s)]["class_key"]) for s in (0, 7)}
    new_in_7 = step[7] - step[0]
    assert new_in_7 and all(k.startswith("_scaled_dot_product") for k in new_in_7)  # attention over 128 + 7 tokens
    later = [e for e in now.expected if (e.stage, e.step) == ("decode", 7)]
    assert {e.class_key for e in later if e.role == "representative"} == new_in_7
    # The GPU host's plan profiled all 22 classes of step 7 again.
    assert len([e for e in ran.expected if (e.stage, e.step) == ("decode", 7)]) == 22
    assert {s: v.classes for s, v in now.stages.items()} == {"prefill": 28, "decode": 22 + len(new_in_7)}


def test_every_class_of_the_profiled_steps_is_profiled_once():
    d = V2 / "default"
    tl = attribution.read_timeline(d / "timeline.sqlite", "nsightflow")
    got = plan.plan_capture(tl, "nsightflow", ["first"], "representatives")
    ran = plan.CapturePlan.read(d / "plan.json")
    # Sampling the first step only, the plan is the GPU host's for the steps they share.
    assert got.expected == [e for e in ran.expected if (e.stage, e.step) != ("decode", 7)]
    assert got.windows == [w for w in ran.windows if (w.stage, w.step) != ("decode", 7)]
    probe = tl.launches[tl.launches["pass_"] == "probe"]
    for w in got.windows:
        mine = probe[(probe["stage"] == w.stage) & (probe["step"] == w.step)]
        planned = [e for e in got.expected if (e.stage, e.step) == (w.stage, w.step)]
        assert Counter(e.class_key for e in planned) == Counter(set(mine["class_key"]))
    # Layers repeat their calls: 28 classes stand for prefill's 128 launches, 22 for each decode step's 136.
    assert {s: (v.classes, v.launches) for s, v in got.stages.items()} == {
        "prefill": (28, 128),
        "decode": (22, 1088),
    }
    # proj and down launch one GEMM kernel with one grid; their calls differ (K = 1024 vs 2816): two classes.
    pre = probe[(probe["stage"] == "prefill")]
    by_kernel = pre.groupby("kernel_key")["op"].nunique()
    assert (by_kernel > 1).any()
    # The capture is the plan: ncu's own NVTX cells name each result's step and operator call.
    raw, _ = ncu_csv.parse_raw_csv(d / "capture.raw.csv")
    for stack, e in zip(raw["nvtx_stack"], ran.expected, strict=True):
        step = next(x for x in stack if x["domain"] == "nsightflow.probe")
        op = next(x for x in stack if x["domain"] == "nsightflow.ops")
        assert (step["range"], step["payload"]) == (e.stage, e.step)
        assert op["payload"] == (e.unit - 1) // 2 and e.class_key.startswith(op["range"] + "#")


def test_a_tampered_capture_is_refused():
    d = V2 / "default"
    raw, _ = ncu_csv.parse_raw_csv(d / "capture.raw.csv")
    res = ncu_csv.result_metrics(raw)
    exp = plan.expected_frame(plan.CapturePlan.read(d / "plan.json"))
    matching.match_to_plan(res, exp, "capture")
    swapped = res.copy()
    swapped.loc[[0, 1], "ncu_id"] = swapped.loc[[1, 0], "ncu_id"].to_numpy()  # two results in the wrong order
    with pytest.raises(matching.MatchError, match="differs from the planned launch"):
        matching.match_to_plan(swapped, exp, "capture")


def test_backward_kernels_of_autograds_thread_belong_to_backward():
    d = V2 / "train"
    tl = attribution.read_timeline(d / "timeline.sqlite", "nsightflow")
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    con = sqlite3.connect(d / "timeline.sqlite")
    # Plain SQL: kernels whose launch call lies in a backward range, and how many came from that range's thread.
    total, same = con.execute(
        "SELECT COUNT(*), SUM(rt.globalTid = n.globalTid) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId "
        'JOIN NVTX_EVENTS n ON n.eventType = 59 AND rt.start BETWEEN n.start AND n."end" '
        "JOIN StringIds s ON s.id = n.textId WHERE s.value = 'backward' "
        "AND n.domainId = (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'nsightflow')"
    ).fetchone()
    assert total == 256 and same == 2  # nsys' per-thread projection would give backward 2 kernels
    assert len(ranged[ranged["stage"] == "backward"]) == total
    st = _agg("train").stages.set_index("stage")
    assert (st["coverage"] == 1.0).all()
    # dX and dW of every matmul: the backward GEMMs execute twice the forward's tensor FLOPs.
    kernels = _agg("train").kernels
    gemm = (
        kernels[~kernels["kernel"].str.contains("flash|fmha|attention", case=False)]
        .groupby("stage")["flops_tensor"]
        .sum()
    )
    assert gemm["backward"] / gemm["forward"] == pytest.approx(2.0, rel=0.1)


def test_cuda_graph_kernels_belong_to_their_decode_steps_and_measure_what_eager_does():
    d = V2 / "graph"
    tl = attribution.read_timeline(d / "timeline.sqlite", "nsightflow")
    dec = tl.launches[(tl.launches["pass_"] == "ranged") & (tl.launches["stage"] == "decode")]
    assert dec["graph"].all() and (dec.groupby("step").size() == 72).all()
    con = sqlite3.connect(d / "timeline.sqlite")
    # Graph kernels carry the correlation id of the cudaGraphLaunch that ran them (--cuda-graph-trace=node).
    launches = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt "
            "ON rt.correlationId = k.correlationId JOIN StringIds s ON s.id = rt.nameId WHERE k.graphNodeId IS NOT NULL"
        )
    }
    assert launches and all(name.startswith("cudaGraphLaunch") for name in launches)
    graph = _agg("graph")
    eager = _agg("small").stages.set_index("stage")
    st = graph.stages.set_index("stage")
    assert st.loc["decode", "flops_measured"] == pytest.approx(eager.loc["decode", "flops_measured"], rel=1e-3)
    assert st.loc["decode", "coverage"] == 1.0
    assert any("replays CUDA graphs" in n.message for n in graph.notes)  # and no analytic FLOPs are made up for it


def test_range_replay_totals_beside_the_kernel_totals():
    d = V2 / "ranges"
    st = _agg("ranges", ranges_export=d / "ranges.raw.csv", ranges_plan=d / "ranges.plan.json").stages
    st = st.set_index("stage")
    for stage in ("prefill", "decode"):
        assert st.loc[stage, "flops_tensor_ranges"] == pytest.approx(st.loc[stage, "flops_tensor_measured"], rel=1e-3)
    # A range keeps data in L2 between its kernels; kernel replay flushes caches before each kernel.
    assert st.loc["prefill", "dram_bytes_ranges"] < st.loc["prefill", "dram_bytes_measured"]


TWO_STEPS = {("prefill", 0), ("decode", 0), ("decode", 7)}


def _every_decode_step():
    """The HuggingFace Llama run whose capture profiled every decode step: its timeline, plan, ranged-pass launches,
    results joined to the plan, and those results with decode's steps 1 to 6 left out (as if only 0 and 7 were
    sampled: TWO_STEPS)."""
    d = V2 / "llama"
    tl = attribution.read_timeline(d / "timeline.sqlite", "nsightflow")
    ran = plan.CapturePlan.read(d / "plan.json")
    raw, _ = ncu_csv.parse_raw_csv(d / "capture.raw.csv")
    matched = matching.match_to_plan(ncu_csv.result_metrics(raw), plan.expected_frame(ran), "capture")
    two = matched[(matched["stage"] != "decode") | matched["step"].isin([0, 7])]
    return tl, ran, tl.launches[tl.launches["pass_"] == "ranged"], matched, two


def test_unsampled_steps_are_scaled_from_the_first_and_last_of_the_same_launch_sequence():
    # HuggingFace Llama with GQA (4 KV heads of 16), bf16 on the H200. Its KV cache grows by torch.cat, whose
    # grid grows every step; this capture was planned when that made each step its own launch sequence, so it
    # profiled every decode step: the measurement of steps 1-6 is the reference for scaling from 0 and 7.
    tl, ran, ranged, matched, two = _every_decode_step()
    every = metrics.stage_measured(metrics.launch_values(ranged, matched, {(w.stage, w.step) for w in ran.windows}))
    scaled = metrics.stage_measured(metrics.launch_values(ranged, two, TWO_STEPS))
    every, scaled = every.set_index("stage"), scaled.set_index("stage")
    assert scaled.loc["decode", "flops"] == pytest.approx(every.loc["decode", "flops"], rel=1e-6)
    assert scaled.loc["decode", "dram_bytes"] == pytest.approx(every.loc["decode", "dram_bytes"], rel=1e-3)
    assert scaled.loc["decode", "covered_ns"] == scaled.loc["decode", "busy_ns"]  # coverage 100%
    # Kernels, not grids, make a launch sequence: one for all 8 steps, so a plan today samples 2 of them, and in
    # step 7 profiles only the 4 calls whose shapes grew (attention and the cache's torch.cat over 7 more tokens).
    _, now, _, results = _replanned("llama")
    assert now.stages["decode"].structures == 1 and now.stages["decode"].profiled == 39 + 4
    assert ran.stages["decode"].profiled == 8 * 39
    today = _agg_replanned("llama", tl, now, results)
    assert today.loc["decode", "flops_measured"] == pytest.approx(every.loc["decode", "flops"], rel=1e-6)
    # A GEMM measured once instead of in two steps: its DRAM bytes vary a little from launch to launch (+0.16%).
    assert today.loc["decode", "dram_bytes_measured"] == pytest.approx(every.loc["decode", "dram_bytes"], rel=5e-3)
    assert today.loc["decode", "coverage"] == 1.0


def test_diagnostics_are_records_that_survive_the_run_files(tmp_path):
    from nsightflow.analysis import runfiles

    agg = _agg("default")
    rec = CaptureRecord(what="representatives", clock_control="none", warnings=["==WARNING== something ncu said"])
    got = diagnostics.diagnose(agg, [rec], Manifest(warnings=["an nsys warning"]))
    assert got[0] == Diagnostic("warning", "nsys", "an nsys warning")
    assert Diagnostic("warning", "ncu capture (representatives)", "==WARNING== something ncu said") in got
    assert any(d.level == "info" and "clocks not locked" in d.message for d in got)
    # Decode is profiled in its first and last steps and scaled to all 8: said as an estimate per stage.
    scaled = [d for d in got if d.level == "estimate" and d.source == "decode"]
    assert scaled and all(isinstance(d, Diagnostic) for d in got)
    assert not [d for d in got if d.source == "workload"]  # the decoder declared its dtype: nothing to say
    why = "not declared by the workload: 100% of the GEMM and attention FLOPs of the probe pass ran in bf16"
    inferred = diagnostics.diagnose(agg, [rec], Manifest(precision_level="info", precision_why=why))
    assert Diagnostic("info", "workload", f"MFU against the bf16 peak: {why}") in inferred
    paths = [tmp_path / n for n in ("kernels.csv", "stages.csv", "summary.json")]
    extra = [tmp_path / n for n in ("ranks.csv", "experts.csv", "steps.csv")]
    out = runfiles.RunFiles(paths[0], paths[1], *extra, paths[2])
    runfiles.write_run(agg, out, [], got)
    assert pd.read_csv(tmp_path / "ranks.csv").empty  # one process: the ranks table's header only
    assert pd.read_csv(tmp_path / "experts.csv").empty  # no grouped GEMM: the experts table's header only
    assert pd.read_csv(tmp_path / "steps.csv").empty  # a callable: the steps table's header only
    Manifest(precision="bf16").write(tmp_path / "manifest.json")
    back = runfiles.load_run("r", *paths, tmp_path / "manifest.json", tmp_path / "experts.csv")
    assert back["diagnostics"] == agg.notes + got and back["peaks"] == agg.peaks
    # notes and diagnostics are one list of records, none of its lines twice (coverage said once: test_handmade)
    assert all(d.level == "note" for d in agg.notes) and not [d for d in got if d.level == "note"]
    texts = [d.text for d in back["diagnostics"]]
    assert len(texts) == len(set(texts))
    assert Summary.read(paths[2]).notes()[0].startswith("capture: one profiled launch per class")


def test_measured_flops_by_the_operator_that_launched_each_kernel():
    # The probe pass names each kernel's operator; the classes add up to the stage's measured FLOPs.
    for run in ("small", "llama", "train", "graph"):
        st = _agg(run).stages
        parts = st[[f"flops_measured_{c}" for c in metrics.OP_CLASSES]].sum(axis=1)
        assert parts.to_numpy() == pytest.approx(st["flops_measured"].to_numpy(), rel=1e-12)
    llama = _agg("llama").stages.set_index("stage").loc["prefill"]
    # The model's GEMMs from its shapes (hidden 1024; 16 heads of 64, 4 of them for keys and values; MLP 2816;
    # 4 layers; 4 × 512 tokens; the LM head on each sequence's last token only), 2·M·N·K each.
    h, kv, mlp, tokens, layers, vocab = 1024, 4 * 64, 2816, 4 * 512, 4, 32000
    gemm = layers * tokens * 2 * h * (h + 2 * kv + h + 3 * mlp) + 2 * 4 * h * vocab
    assert llama["flops_measured_gemm"] == pytest.approx(gemm, rel=0.002)  # the head's 4 rows run as 8: +0.14%
    # Causal attention executes at least the model's half and at most the full square (whole tiles on the
    # diagonal): QKᵀ and PV, 2·S·S·D each per head.
    full = layers * 4 * 16 * 2 * 2 * 512 * 512 * 64
    causal = full * (512 * 513 // 2) / 512**2
    assert causal < llama["flops_measured_attention"] <= full
    assert llama["flops_measured_unattributed"] == 0
    # A CUDA-graph decode's kernels are launched by the replay, not by an operator: none is claimed.
    graph = _agg("graph").stages.set_index("stage").loc["decode"]
    assert graph["flops_measured_unattributed"] == graph["flops_measured"] > 0


def test_a_capture_without_non_tensor_flops_reports_them_as_not_collected():
    # The default decoder as the default config now captures it: bf16 tensor FLOPs, no SASS counts.
    d = V3 / "default"
    cmd = json.loads((d / "capture.cmd.json").read_text())
    assert cmd["tensor_precisions"] == ["bf16"] and cmd["non_tensor_flops"] is False
    raw, _ = ncu_csv.parse_raw_csv(d / "capture.raw.csv")
    assert not [c for c in raw.columns if "__sass_" in c]
    tensor = {c.rsplit(".", 1)[0] for c in raw.columns if c.startswith("sm__ops_path_tensor_src")}
    assert tensor == {ncu_metrics.TENSOR_FLOP_METRICS["bf16"].removesuffix(".sum")}
    agg = _agg("default", V3)
    st = agg.stages.set_index("stage")
    assert st["flops_measured"].isna().all()  # not collected: never a partial sum
    assert (st["coverage"] == 1.0).all()
    # The same workload on the same GPU with every counter collected (h200_v2, an earlier session).
    full = _agg("default").stages.set_index("stage")
    assert st["flops_tensor_measured"].to_numpy() == pytest.approx(full["flops_tensor_measured"].to_numpy(), rel=1e-9)
    hfu = st["flops_tensor_measured"] / (st["gpu_busy_ms"] * 1e-3) / agg.peaks.compute
    assert st["hfu_busy"].to_numpy() == pytest.approx(hfu.to_numpy())
    # Kernel rates from tensor FLOPs; a kernel without tensor work has none (its FLOPs are unknown, not zero).
    k = agg.kernels
    assert k.loc[k["flops_tensor"] == 0, "arithmetic_intensity"].isna().all()
    assert (k.loc[k["flops_tensor"] > 0, "arithmetic_intensity"] > 0).all()
    notes = [x.message for x in diagnostics.diagnose(agg, [CaptureRecord.from_dict(cmd)])]
    assert any("not collected" in n for n in notes) and any("collected for bf16" in n for n in notes)
    # Left out by hand where a float32 GEMM ran on the FMA units: HFU is then only a lower bound, and it says so.
    forced = diagnostics.diagnose(agg, [CaptureRecord.from_dict({**cmd, "precisions_seen": ["bf16", "fp32"]})])
    assert any(x.level == "warning" and "HFU is a lower bound" in x.message for x in forced)


def test_every_precision_the_operators_ran_is_collected():
    # dtype bfloat16, but n×n matmuls in bf16, fp16 and float32 with TF32 allowed (tests/workloads.py).
    d = V3 / "mixed"
    assert json.loads((d / "analytic_flops.json").read_text())["stages"]["mixed"]["tensor_precisions"] == [
        "bf16",
        "fp16",
        "tf32",
    ]
    cmd = json.loads((d / "capture.cmd.json").read_text())
    assert cmd["tensor_precisions"] == ["bf16", "fp16", "tf32"] and cmd["non_tensor_flops"] is False
    n = json.loads((d / "manifest.json").read_text())["params"]["n"]
    st = _agg("mixed", V3).stages.set_index("stage")
    assert st.loc["mixed", "flops_tensor_measured"] == 3 * 2 * n**3


H100_PROBE = DATA / "h100_probe"  # the default decoder's timeline of the probe pass alone (H100), with its capture


def test_a_timeline_of_the_probe_pass_alone_is_attributed_to_its_steps():
    manifest = Manifest.read(H100_PROBE / "manifest.json")
    assert manifest.traced_pass == "probe" and manifest.stage_wall_s is None
    tl = attribution.read_timeline(H100_PROBE / "timeline.sqlite", "nsightflow")
    assert tl.probe_stands_in
    # the stages' steps are the probe pass's: as many as the manifest's stages run
    assert tl.ranges.groupby("stage").size().to_dict() == {s["name"]: s["steps"] for s in manifest.stages}
    ranged, probe = (tl.launches[tl.launches["pass_"] == p] for p in ("ranged", "probe"))
    # the launches of each step, by plain SQL over the probe pass's step ranges (the export has no stage range)
    sql = sql_launches(H100_PROBE / "timeline.sqlite")
    for (stage, step), mine in ranged.groupby(["stage", "step"]):
        theirs = sql[(sql["stage"] == stage) & (sql["step"] == step)]
        assert list(mine.sort_values("seq")["kernel"]) == list(theirs["kernel"]), (stage, step)
    assert len(ranged) == len(sql)
    # each launch is its own twin: same kernels, classes and operators in the same places
    cols = ["stage", "step", "seq", "kernel_key", "class_key", "op", "duration_ns"]
    assert ranged[cols].reset_index(drop=True).equals(probe[cols].reset_index(drop=True))
    assert ranged["twin"].all() and (probe["unit"] >= 0).all()
    # the captures path (nested ranges, a guessed domain) reads the same steps from it
    nested = attribution.read_timeline(H100_PROBE / "timeline.sqlite", "nsightflow", nested=True)
    assert nested.probe_stands_in
    assert nested.ranges.groupby("stage").size().to_dict() == tl.ranges.groupby("stage").size().to_dict()


def test_the_aggregate_rules_inputs_by_their_snakemake_names_are_the_runs_files():
    """The rule's named inputs (snakemake's own container, ``ranges`` only with config ncu.ranges) become the run's
    record field by field: a name mistyped in one place would aggregate another file or none."""
    from snakemake.iocontainers import InputFiles

    from nsightflow.analysis.nsight import NsightInputs

    names = ("sqlite", "plan", "export", "flops", "ceilings", "manifest")
    given = {n: f"results/r/{n}.x" for n in (*names, "cmd")}
    got = NsightInputs.of(InputFiles(fromdict=given))
    assert [getattr(got, n) for n in names] == [Path(given[n]) for n in names]
    assert got.ranges_export is None and got.ranges_plan is None
    ranged = NsightInputs.of(InputFiles(fromdict=given | {"ranges": "r.csv", "ranges_plan": "rp.json"}))
    assert (ranged.ranges_export, ranged.ranges_plan) == (Path("r.csv"), Path("rp.json"))


def test_the_plan_and_tables_of_a_probe_pass_timeline_are_those_the_gpu_host_made():
    tl = attribution.read_timeline(H100_PROBE / "timeline.sqlite", "nsightflow")
    now = plan.plan_capture(tl, "nsightflow", ["first", "last"], "representatives")
    ran = plan.CapturePlan.read(H100_PROBE / "plan.json")
    assert now.expected == ran.expected and [w.units for w in now.windows] == [w.units for w in ran.windows]
    agg = aggregate_recorded(
        H100_PROBE,
        manifest_json=H100_PROBE / "manifest.json",
        capture_record=CaptureRecord.read(H100_PROBE / "capture.cmd.json"),
    )
    st, host = agg.stages.set_index("stage"), pd.read_csv(H100_PROBE / "stages.csv").set_index("stage")
    for col in ("wall_ms", "gpu_busy_ms", "flops_tensor_measured", "dram_bytes_measured", "coverage", "mfu_busy"):
        assert st[col].to_dict() == pytest.approx(host[col].to_dict(), rel=1e-9), col
    # wall times are the timed pass's; the probe pass's own (slowed by its dispatch mode) are not shown as profiled
    manifest = Manifest.read(H100_PROBE / "manifest.json")
    for stage in ("prefill", "decode"):
        assert st.loc[stage, "wall_ms"] == pytest.approx(sum(manifest.program_wall_s[stage]) * 1e3)
    assert st["wall_profiled_ms"].isna().all() and (st["coverage"] == 1.0).all()
    assert any("traced the probe pass alone" in n.text for n in agg.notes)


def test_each_steps_busy_time_and_counters_are_its_launches(tmp_path):
    # steps.csv's measured columns, on the HuggingFace Llama run whose capture profiled every decode step: each step's
    # busy time is its kernels' (plain SQL over the export), and its counters scaled from steps 0 and 7 are those
    # measured in the step itself.
    d = V2 / "llama"
    _, ran, ranged, matched, two = _every_decode_step()
    every = steps.step_measured(metrics.launch_values(ranged, matched, {(w.stage, w.step) for w in ran.windows}))
    scaled = steps.step_measured(metrics.launch_values(ranged, two, TWO_STEPS))
    every, scaled = every.set_index(["stage", "step"]), scaled.set_index(["stage", "step"])
    by_sql = sql_launches(d / "timeline.sqlite").groupby(["stage", "step"])["duration_ns"].sum()
    assert sorted(every.index) == sorted(by_sql.index) == [("decode", k) for k in range(8)] + [("prefill", 0)]
    for key in every.index:
        assert every.loc[key, "busy_ns"] == scaled.loc[key, "busy_ns"] == by_sql[key]
        assert scaled.loc[key, "flops_tensor"] == pytest.approx(every.loc[key, "flops_tensor"], rel=1e-6)
        assert scaled.loc[key, "dram_bytes"] == pytest.approx(every.loc[key, "dram_bytes"], rel=0.005), key  # 0.18%
    # the run's steps.csv rows, where a command's timed run gave every step a wall (written here for this callable run)
    walls = {"prefill": [0.010], "decode": [0.002] * 8}
    Manifest(precision="bf16", every_wall_s=walls, program_wall_s=walls).write(tmp_path / "manifest.json")
    table = _agg("llama", manifest_json=tmp_path / "manifest.json").steps.set_index(["stage", "step"])
    for key in every.index:
        assert table.loc[key, "busy_ms"] == pytest.approx(by_sql[key] / 1e6, rel=1e-12)
        assert table.loc[key, "flops_tensor_measured"] == pytest.approx(every.loc[key, "flops_tensor"], rel=1e-6)
