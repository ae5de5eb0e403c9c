"""A job of several processes (torchrun) on the CPU: the ranks' own NVTX ranges give per-rank stage rows, every
rank is timed, the profiled rank is counted, and interrupting the workflow leaves no rank behind. Communication
arithmetic (nsightflow.capture.read.comm) against intervals worked out by hand; NCCL names from a real H200 timeline."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from conftest import (
    ROOT,
    exposed_by_hand,
    foreground_workflow,
    left_in_tmp,
    slow_ranks_script,
    snakemake,
    sql_rank_kernels,
    steady_rows,
    steady_steps,
    torch_workflow,
    wait_gone,
)

from nsightflow.capture.read.comm import is_comm, overlapped

STEPS, HIDDEN, LAYERS, BATCH, TOKENS = 2, 64, 2, 2, 16


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


def test_overlap_counts_each_moment_of_compute_once():
    # communication [0,10] [10,30] [50,60]; compute [5,9] [8,12] (overlapping: union [5,12]) [20,25] [55,100]
    comm = np.array([0, 10, 50]), np.array([10, 30, 60])
    got = overlapped(*comm, np.array([5, 8, 20, 55]), np.array([9, 12, 25, 100]))
    assert list(got) == [5.0, 7.0, 5.0]  # [5,10]; [10,12]+[20,25]; [55,60]
    assert list(overlapped(np.array([0]), np.array([10]), np.array([], dtype=int), np.array([], dtype=int))) == [0.0]


def test_nccl_kernels_are_communication_and_nothing_else_is():
    # names as nsys printed them for a DDP step on two H200s (benchmarks/ranks_diag.sh)
    names = pd.Series(
        [
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
            "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
            "void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm *, unsigned long, ncclWork *)",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
        ]
    )
    assert list(is_comm(names)) == [True, True, True, False, False]


@pytest.mark.parametrize("parallel", ["data", "tensor", "data-llama"])
def test_two_ranks_on_the_cpu_report_per_rank_stages(tmp_path, parallel):
    parallel, _, model = parallel.partition("-")
    args = ["--parallel", parallel, "--steps", str(STEPS), "--hidden", str(HIDDEN), "--layers", str(LAYERS)]
    args += ["--model", model or "mlp"]
    args += ["--batch", str(BATCH), "--tokens", str(TOKENS)]
    work = torch_workflow(tmp_path, [{"name": "job", "command": _torchrun("examples/ranks_program.py", *args)}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "job"
    stages = ["forward", "backward", "optimizer"] if parallel == "data" else ["prefill", "decode"]
    steps = {"forward": STEPS, "backward": STEPS, "optimizer": STEPS, "prefill": 1, "decode": STEPS}
    steps = {s: steady_steps(run, s, n) for s, n in steps.items() if s in stages}  # warm-up steps set apart
    table = pd.read_csv(run / "stages.csv").set_index("stage")
    assert list(table.index) == stages
    assert [int(table.loc[s, "range_instances"]) for s in stages] == [steps[s] for s in stages]
    manifest = json.loads((run / "manifest.json").read_text())
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1] and manifest["profiled_rank"] == 0
    ranks = pd.DataFrame(json.loads((run / "summary.json").read_text())["ranks"])
    assert sorted(zip(ranks["rank"], ranks["stage"], strict=True)) == sorted((r, s) for r in (0, 1) for s in stages)
    for _, row in ranks.iterrows():
        assert row["steps"] == steps[row["stage"]] and row["wall_ms"] > 0 and row["device"] == "cpu"
    assert ranks.groupby("stage")["slowest"].sum().eq(1).all()  # one slowest rank per stage
    # The same rows as a table pandas reads, each rank's wall per step from its own steps in the manifest.
    csv = pd.read_csv(run / "ranks.csv")
    assert sorted(zip(csv["rank"], csv["stage"], strict=True)) == sorted(
        zip(ranks["rank"], ranks["stage"], strict=True)
    )
    for _, row in csv.iterrows():
        mine = next(r for r in manifest["ranks"] if r["rank"] == row["rank"])["program_wall_s"][row["stage"]]
        assert row["wall_ms_per_step"] == pytest.approx(sum(mine) * 1e3 / len(mine), rel=1e-9)
    own = {
        (s, r["rank"]): sum(r["program_wall_s"][s]) / len(r["program_wall_s"][s])
        for r in manifest["ranks"]
        for s in stages
    }
    slowest = {(s, max((0, 1), key=lambda rank, s=s: own[(s, rank)])) for s in stages}  # by wall per step
    assert set(zip(csv.loc[csv["slowest"], "stage"], csv.loc[csv["slowest"], "rank"], strict=True)) == slowest
    # The profiled rank's analytic count, from the model's shapes.
    first = "prefill" if parallel == "tensor" else "forward"
    if not model:  # the MLP stack: 2·tokens·in·out per linear; tensor parallel shards 4·hidden over 2 ranks
        per_token = 2 * 2 * HIDDEN * 4 * HIDDEN * LAYERS // (2 if parallel == "tensor" else 1)
        assert table.loc[first, "flops_analytic"] == per_token * BATCH * TOKENS * steps[first]
    else:  # a Llama's MLP alone (gate, up, down: 3 linears of hidden x 4·hidden) is a floor of its forward
        mlp = 2 * 3 * HIDDEN * 4 * HIDDEN * LAYERS * BATCH * TOKENS * steps[first]
        assert table.loc[first, "flops_analytic"] > mlp
    # Each rank's own torch.profiler trace; the run page shows the ranks side by side.
    assert (run / "torch" / "trace.json").exists() and (run / "torch" / "trace.rank1.json").exists()
    page = (run / "report.html").read_text()
    assert "<h3>Ranks</h3>" in page and "slowest" in page


def test_a_stage_that_one_rank_alone_runs_is_that_ranks(tmp_path):
    """Rank 0 alone evaluates (nanoGPT's master process does): the stage is reported, rank 1 has no step of it."""
    args = ["--parallel", "data", "--steps", str(STEPS), "--hidden", str(HIDDEN), "--layers", str(LAYERS)]
    args += ["--batch", str(BATCH), "--tokens", str(TOKENS), "--evaluate", "3"]
    work = torch_workflow(tmp_path, [{"name": "job", "command": _torchrun("examples/ranks_program.py", *args)}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "job"
    table = pd.read_csv(run / "stages.csv").set_index("stage")
    assert list(table.index) == ["forward", "backward", "optimizer", "evaluate"]
    assert int(table.loc["evaluate", "range_instances"]) == steady_steps(run, "evaluate", 3)
    csv = pd.read_csv(run / "ranks.csv").set_index(["rank", "stage"])
    assert (
        csv.loc[(0, "evaluate"), "steps"] == steady_steps(run, "evaluate", 3) and csv.loc[(1, "evaluate"), "steps"] == 0
    )
    assert csv.loc[(1, "forward"), "steps"] == csv.loc[(0, "forward"), "steps"] > 0


def test_a_callable_launched_as_two_processes_reports_each_rank(tmp_path):
    # config nprocs: the callable runs as two torchrun processes (nsightflow.capture.inside.runner), a job of ranks
    # like a
    # command's: each rank's own rows, the profiled rank counted. Expected FLOPs from the shapes: 2·tokens·hidden²
    # per step (the all-reduce's additions are communication, not operator FLOPs).
    hidden, tokens, steps = 32, 8, 3
    args = {"hidden": hidden, "tokens": tokens, "steps": steps}
    job = {"name": "job", "callable": "workloads:ranks_matmul", "nprocs": 2, "rank": 1, "args": args}
    work = torch_workflow(tmp_path, [job])
    tmp = tmp_path / "tmp"  # the job's temporary folder: torchrun leaves nothing there, its records go to the run
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(work / "tests"), "TMPDIR": str(tmp)}
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    run = work / "results" / "job"
    assert not list(tmp.glob("torchelastic_*")) and (run / "logs" / "torchrun").is_dir()
    table = pd.read_csv(run / "stages.csv").set_index("stage")
    steps = steady_steps(run, "forward", steps)  # warm-up steps set apart
    assert list(table.index) == ["forward"] and int(table.loc["forward", "range_instances"]) == steps
    assert table.loc["forward", "flops_analytic"] == 2 * tokens * hidden * hidden * steps
    manifest = json.loads((run / "manifest.json").read_text())
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1] and manifest["profiled_rank"] == 1
    ranks = pd.DataFrame(json.loads((run / "summary.json").read_text())["ranks"])
    assert sorted(ranks["rank"]) == [0, 1] and (ranks["steps"] == steps).all() and (ranks["wall_ms"] > 0).all()
    assert ranks.set_index("rank").loc[1, "profiled"] and not ranks.set_index("rank").loc[0, "profiled"]


def test_interrupting_a_job_of_ranks_leaves_none_behind(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = slow_ranks_script(tmp_path / "slow_ranks.py", marks)
    work = torch_workflow(tmp_path, [{"name": "slow", "command": _torchrun(str(script))}])
    proc = foreground_workflow(work)
    deadline = time.time() + 120
    while len(list(marks.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in marks.iterdir()]
    assert len(pids) == 2, "the ranks did not start"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the foreground group
    proc.wait(timeout=120)
    assert wait_gone(pids)
    left = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout.split()
    assert not left
    assert left_in_tmp(work) == []  # torchrun's logs were in the job's own folder, removed with it


# A real two-rank timeline: tensor-parallel decode over NCCL on two H200s (tests/data/h200x2_tp_ranks, trimmed by
# benchmarks/trim_fixtures.py from the GPU tier's run). Domain ids are numbered per process in it: id 4 is
# 'nsightflow' in rank 0 and 'nsightflow.ranks.ops' in rank 1.
TP = ROOT / "tests" / "data" / "h200x2_tp_ranks"


def test_a_real_two_rank_timeline_gives_each_rank_its_own_kernels():
    from nsightflow.analysis import ranks
    from nsightflow.capture.read.attribution import read_timeline
    from nsightflow.records import Manifest

    manifest = Manifest.read(TP / "manifest.json")
    pids = {r["rank"]: r["pid"] for r in manifest.ranks}
    truth = sql_rank_kernels(TP / "timeline.sqlite", "LLM")  # the program's own ranges, per process
    # The stage tables are rank 0's: its kernels only, every one of them.
    tl = read_timeline(TP / "timeline.sqlite", "nsightflow")
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    want = truth[truth["pid"] == pids[0]].groupby("stage").size()
    assert ranged.groupby("stage").size().to_dict() == want.to_dict() == {"prefill": 10, "decode": 31}
    # Every rank's kernels in the ranks table, NCCL's apart, and the exposed part walked by hand.
    table = ranks.rank_table(ranks.rank_launches(TP / "timeline.sqlite", "nsightflow"), manifest)
    assert len(table) == 4 and set(table["device"]) == {"cuda:0", "cuda:1"}
    for _, row in table.iterrows():
        g = truth[(truth["pid"] == row["pid"]) & (truth["stage"] == row["stage"])]
        comm = g[g["kernel"].str.startswith("nccl")]
        assert row["launches"] == len(g) and row["comm_launches"] == len(comm) > 0
        assert row["comm_ms"] == pytest.approx((comm["end"] - comm["start"]).sum() / 1e6)
        assert row["comm_exposed_ms"] == pytest.approx(exposed_by_hand(g) / 1e6)
        assert row["comm_overlapped_ms"] + row["comm_exposed_ms"] == pytest.approx(row["comm_ms"])


def test_a_ranks_busy_time_is_of_its_steady_steps_with_kernels_running_at_once_counted_once():
    """The walls are the steady steps': busy and communication leave the warm-up steps out too (a rank's first
    collective waits for the others to start: 300 ms of "busy" against a 62 ms wall on nanoGPT's rank 0), and a
    kernel overlapping another counts once (busy never exceeds the time the kernels spanned)."""
    from dataclasses import replace

    from nsightflow.analysis import ranks
    from nsightflow.records import Manifest

    manifest = replace(Manifest.read(TP / "manifest.json"), warmup_steps=[{"stage": "decode", "step": 0}])
    truth = sql_rank_kernels(TP / "timeline.sqlite", "LLM")
    steady = steady_rows(truth, manifest.warmup_steps)
    table = ranks.rank_table(ranks.rank_launches(TP / "timeline.sqlite", "nsightflow"), manifest)
    for _, row in table.iterrows():
        g = steady[(steady["pid"] == row["pid"]) & (steady["stage"] == row["stage"])]
        assert row["launches"] == len(g) > 0
        spans, busy, reach = sorted(zip(g["start"], g["end"], strict=True)), 0, None
        for s, e in spans:  # the union by hand
            reach = s if reach is None else max(reach, s)
            busy, reach = busy + max(0, e - reach), max(reach, e)
        assert row["gpu_busy_ms"] == pytest.approx(busy / 1e6)
        assert row["gpu_busy_ms"] <= (max(g["end"]) - min(g["start"])) / 1e6
    decode = table[table["stage"] == "decode"]
    assert (decode["launches"] < truth[truth["stage"] == "decode"].groupby("pid").size().min()).all()


def test_a_ranks_communication_is_split_into_waiting_for_the_slower_rank_and_the_rest():
    """A collective runs until its last rank joins: the n-th launch of a communication kernel in a stage, matched
    across the ranks, waits on each rank for its time beyond the shortest rank's. On the real two-rank capture, rank
    1's prefill spent 148.8 ms in NCCL against a 0.44 ms wall in the program: nearly all of it waiting."""
    from nsightflow.analysis import ranks
    from nsightflow.records import Manifest

    manifest = Manifest.read(TP / "manifest.json")
    truth = sql_rank_kernels(TP / "timeline.sqlite", "LLM")
    comm = truth[truth["kernel"].str.startswith("nccl")].sort_values("start")
    comm = comm.assign(dur=comm["end"] - comm["start"], nth=comm.groupby(["pid", "stage", "kernel"]).cumcount())
    comm["wait"] = comm["dur"] - comm.groupby(["stage", "kernel", "nth"])["dur"].transform("min")
    assert comm.groupby(["stage", "kernel", "nth"]).size().eq(2).all()  # every collective on both ranks
    table = ranks.rank_table(ranks.rank_launches(TP / "timeline.sqlite", "nsightflow"), manifest)
    for _, row in table.iterrows():
        mine = comm[(comm["pid"] == row["pid"]) & (comm["stage"] == row["stage"])]
        assert row["comm_wait_ms"] == pytest.approx(mine["wait"].sum() / 1e6)
        assert 0 <= row["comm_wait_ms"] <= row["comm_ms"]
    prefill = table[table["stage"] == "prefill"].set_index("rank")
    assert prefill.loc[1, "comm_ms"] > 100 * prefill.loc[1, "wall_ms"]  # the capture's artifact, as recorded
    assert prefill.loc[1, "comm_ms"] - prefill.loc[1, "comm_wait_ms"] == pytest.approx(prefill.loc[0, "comm_ms"])
    said = [d.message for d in ranks.rank_notes(table, manifest) if d.source == "prefill"]
    assert any("148.597 ms of it waiting for a slower rank" in m for m in said)


def test_a_collective_on_one_rank_alone_has_no_waiting_time_to_tell():
    """Nothing to compare with: its wait is unknown (NaN), never 0; a compute launch waits 0."""
    from nsightflow.analysis.ranks import collective_waits

    launches = pd.DataFrame(
        {"pid": [1, 1, 2, 1], "stage": ["s"] * 4, "step": [0] * 4, "kernel": ["ncclA", "ncclA", "ncclA", "gemm"]}
        | {"start": [0, 100, 0, 5], "end": [10, 103, 4, 9], "comm": [True, True, True, False]}
    )
    got = collective_waits(launches)
    assert got[0] == 6 and got[2] == 0 and np.isnan(got[1]) and got[3] == 0


def test_ranks_with_unequal_step_counts_are_compared_per_step():
    """Rank 1 ran 3 steps of 10 ms (30 ms), rank 0 ran 2 of 12 ms (24 ms): by totals rank 1 looked slowest, per step
    rank 0 is (12 ms against 10 ms, 20% over)."""
    from nsightflow.analysis.ranks import rank_notes
    from nsightflow.records import Manifest

    table = pd.DataFrame(
        {"stage": ["decode", "decode"], "rank": [0, 1], "steps": [2, 3], "wall_ms": [24.0, 30.0]}
        | {"comm_ms": [0.0, 0.0], "comm_exposed_ms": [0.0, 0.0]}
    )
    said = [d.message for d in rank_notes(table, Manifest(profiled_rank=0)) if d.source == "decode"]
    want = "rank 0 is the slowest (12.000 ms a step, 20.0% over the fastest rank; the ranks ran 2 and 3 steps)."
    assert said == [want]
