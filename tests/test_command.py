"""A command workload on the CPU: a program with its own NVTX ranges and no nsightflow import, profiled unchanged
through the real workflow (torch.profiler backend); its stages discovered or named; bad entries refused."""

from __future__ import annotations

import getpass
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, snakemake, steady_steps, torch_workflow

from nsightflow.capture.launch.command_call import fill
from nsightflow.capture.launch.discovery import discover
from nsightflow.capture.read.warmup import Window
from nsightflow.errors import ConfigError, WorkloadError
from nsightflow.rules.config import check

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
ARGS = {"batch": 2, "prompt": 48, "hidden": 128, "layers": 2, "steps": 3}


def _argv(**extra):
    a = {**ARGS, **extra}
    flags = [x for k in ("batch", "prompt", "hidden", "layers", "steps") for x in (f"--{k}", str(a[k]))]
    return [sys.executable, "examples/nvtx_program.py", *flags]


def _linear_flops(tokens: int) -> int:
    """2·tokens·in·out for each of the two linear layers of each block (hidden ↔ 4·hidden)."""
    return 2 * tokens * ARGS["hidden"] * 4 * ARGS["hidden"] * 2 * ARGS["layers"]


@pytest.mark.parametrize("nvtx_api", ["nvtx.annotate", "torch.cuda.nvtx"])
def test_a_script_with_its_own_nvtx_ranges_reports_its_stages(tmp_path, nvtx_api):
    extra = ["--torch-nvtx"] if nvtx_api == "torch.cuda.nvtx" else []
    # The domain is discovered (LLM, or the default domain '' for torch.cuda.nvtx); a swept value fills {steps}.
    command = [*_argv()[:-1], "{steps}", *extra]
    work = torch_workflow(tmp_path, [{"name": "script", "command": command, "args": {"steps": ARGS["steps"]}}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "script"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert list(stages.index) == ["prefill", "decode"]
    decode = steady_steps(run, "decode", ARGS["steps"])  # the steady ones: a cold first step is set apart
    assert stages.loc["prefill", "range_instances"] == 1 and stages.loc["decode", "range_instances"] == decode
    assert stages.loc["prefill", "flops_analytic"] == _linear_flops(ARGS["batch"] * ARGS["prompt"])
    assert stages.loc["decode", "flops_analytic"] == _linear_flops(ARGS["batch"]) * decode
    assert (stages["wall_ms"] > 0).all() and (stages["kernels"] > 0).all()
    # pace: each decode step but the last is followed by the next (its pace at least its wall: the next starts once
    # it has ended); the last has none; prefill is followed by decode, never itself; the stage's is the median
    steps = pd.read_csv(run / "steps.csv").set_index(["stage", "step"])
    decode = steps.loc["decode"]
    assert decode["pace_ms"].iloc[-1] != decode["pace_ms"].iloc[-1]  # NaN
    assert (decode["pace_ms"].iloc[:-1] >= decode["wall_ms"].iloc[:-1]).all()
    steady = decode[decode["steady"].astype(bool)]["pace_ms"].dropna()
    assert stages.loc["decode", "pace_ms"] == pytest.approx(steady.median()) and pd.isna(
        stages.loc["prefill", "pace_ms"]
    )
    ranks = pd.read_csv(run / "ranks.csv")  # one process: the table's header, no row
    assert ranks.empty and {"rank", "stage", "wall_ms_per_step", "comm_exposed_ms"} <= set(ranks.columns)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stage_domain"] == ("" if extra else "LLM")
    assert manifest["command"][-1 - len(extra)] == str(ARGS["steps"]) and manifest["callable"] == ""
    page = (run / "report.html").read_text()
    assert "prefill" in page and "examples/nvtx_program.py" in page


def test_named_stages_and_a_missing_one(tmp_path):
    only = {"name": "only_decode", "command": _argv(), "domain": "LLM", "stages": ["decode"]}
    work = torch_workflow(tmp_path, [only])
    snakemake(work, "--cores", "1", "results/report.html")
    stages = pd.read_csv(work / "results" / "only_decode" / "stages.csv")
    decode = steady_steps(work / "results" / "only_decode", "decode", ARGS["steps"])
    assert stages["stage"].tolist() == ["decode"] and stages["range_instances"].tolist() == [decode]
    typo = {"name": "typo", "command": _argv(), "domain": "LLM", "stages": ["decoder"]}
    work = torch_workflow(tmp_path / "b", [typo])
    proc = snakemake(work, "--cores", "1", "results/report.html", check=False)
    assert proc.returncode != 0
    log = (work / "results" / "typo" / "logs" / "torch_profile.log").read_text()
    assert "no range named ['decoder']" in log and "'decode'" in log and "'prefill'" in log


def test_a_program_without_ranges_is_named_with_the_fix(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nprint(torch.ones(3).sum())\n")
    work = torch_workflow(tmp_path, [{"name": "plain", "command": [sys.executable, str(script)]}])
    proc = snakemake(work, "--cores", "1", "results/report.html", check=False)
    assert proc.returncode != 0
    log = (work / "results" / "plain" / "logs" / "torch_profile.log").read_text()
    assert "called no torch.nn.Module" in log and "nvtx.annotate" in log


def _config(**workload):
    return {"workloads": [{"name": "w", **workload}]}


@pytest.mark.parametrize(
    "workload,needle",
    [
        ({"callable": "a.b:c", "command": ["python", "x.py"]}, "not both"),
        ({}, "neither is there"),
        ({"command": ["python", "x.py", "--n", "{n}"]}, "placeholder {n} with no value"),
        ({"callable": "a.b:c", "stages": ["x"]}, "apply to a command: workload only"),
        ({"command": []}, "should be non-empty"),
        ({"callable": "a.b:c", "rank": 1}, "also to a callable with nprocs > 1"),
        ({"callable": "a.b:c", "nprocs": 2, "stages": ["x"]}, "stages apply to a command: workload only;"),
        ({"command": ["python", "x.py"], "nprocs": 2}, "a command starts its own processes"),
        ({"callable": "a.b:c", "nprocs": 0}, "nprocs"),
        ({"command": ["python", "x.py"], "cwd": "no/such/folder"}, "cwd: 'no/such/folder' is not a folder"),
    ],
)
def test_bad_command_entries_are_refused_with_the_key(workload, needle):
    with pytest.raises(ConfigError, match="workloads") as err:
        check(_config(**workload), SCHEMA)
    assert needle in str(err.value)


def test_a_callable_of_several_processes_takes_a_rank_and_gpus():
    check(_config(callable="a.b:c", nprocs=2, rank=1, gpus=2), SCHEMA)


def test_placeholders_take_swept_values():
    check(_config(command=["python", "x.py", "--n", "{n}"], sweep={"n": [1, 2]}), SCHEMA)
    assert fill(["python", "--n={n}", "{m}x"], {"n": 3, "m": "a"}) == ["python", "--n=3", "ax"]


def test_discovery_picks_the_busiest_program_domain_and_one_step_at_a_time():
    # (domain, name, depth, thread, start ns, end ns) as the hook records them
    ranges = [
        ["CCCL", "cub::DeviceRadixSort", 0, 1, 0, 10_000],  # a library's own: never the stages
        ["LLM", "prefill", 0, 1, 100, 400],
        ["LLM", "attention", 1, 1, 150, 200],
        ["LLM", "decode", 0, 1, 500, 600],
        ["LLM", "decode", 0, 1, 700, 800],
        ["", "misc", 0, 1, 900, 950],
    ]
    found = discover({"ranges": ranges}, None, None)
    assert found.domain == "LLM" and found.stages == ["prefill", "decode"]
    assert found.walls == {"prefill": [3e-7], "decode": [1e-7, 1e-7]}
    # named stages: a named range inside another step is part of that step
    nested = [["LLM", "step", 0, 1, 0, 100], ["LLM", "step", 1, 1, 10, 20], ["LLM", "step", 0, 1, 200, 300]]
    assert discover({"ranges": nested}, "LLM", ["step"]).walls == {"step": [1e-7, 1e-7]}
    with pytest.raises(WorkloadError, match="no range named"):
        discover({"ranges": ranges}, "LLM", ["decoder"])


def test_a_timed_range_with_a_span_on_the_gpus_clock_has_that_wall():
    """The timed run's walls on the GPU's clock (nsightflow.capture.inside.step_clock): a range's last column, where
    recorded (> 0), is its wall; where not (0, or a record without it), the host's span stands."""
    ranges = [
        ["LLM", "decode", 0, 1, 0, 100, 0, 250],  # the GPU was still running the step when its range ended
        ["LLM", "decode", 0, 1, 300, 400, 0, 0],  # no event: host span
        ["LLM", "decode", 0, 1, 500, 650],  # a record written before the column existed
    ]
    assert discover({"ranges": ranges}, "LLM", ["decode"]).every_wall == {"decode": [2.5e-7, 1e-7, 1.5e-7]}


def test_a_steps_pace_runs_to_its_stages_next_step_on_the_gpus_clock_where_both_have_it():
    """A step's pace (nsightflow.capture.launch.discovery.step_clocks): from its start to the start of its stage's next
    step in the same thread, where that is the thread's next step; the GPU's starts (the last column) where both have
    one (>= 0), else the host's."""
    ranges = [
        ["LLM", "prefill", 0, 1, 0, 100, 0, 0, -1],
        ["LLM", "decode", 0, 1, 200, 300, 0, 90, 1_000],
        ["LLM", "decode", 0, 2, 320, 330],  # another thread's step between: thread 1's next is still its own
        ["LLM", "decode", 0, 1, 400, 450, 0, 80, 1_500],  # GPU: 1_500 - 1_000
        ["LLM", "decode", 0, 1, 600, 700, 0, 0, -1],  # no GPU start: the host's, 600 - 400
        ["LLM", "prefill", 0, 1, 800, 900],  # another stage comes next: none
        ["LLM", "decode", 0, 1, 1_000, 1_100],  # the last: none
    ]
    found = discover({"ranges": ranges}, "LLM", ["prefill", "decode"], 0)
    assert found.every_pace == {"prefill": [None, None], "decode": [5e-7, None, 2e-7, None, None]}


def test_steps_between_two_clocked_ones_share_the_gpus_time_by_their_host_paces():
    """The timed run clocks a sample of the steps on the GPU (nsightflow.capture.inside.step_clock.Sampler); between
    two clocked steps of one run, the GPU's time from the first's start to the second's (800 ns) is shared in
    proportion to the host paces (100, 200, 100 of 400 ns): 200, 400, 200; after the last clocked step the host's
    pace stands. An unclocked step's wall is its host span (50, 50, 60 ns) and the mean of what its nearest clocked
    steps' GPU spans held beyond their host spans (10 before, 20 after): 65, 65, and 80 after the last."""
    ranges = [
        ["LLM", "decode", 0, 1, 0, 60, 0, 70, 1_000],  # clocked: its span on the GPU's clock
        ["LLM", "decode", 0, 1, 100, 150, 0, 0, -1],
        ["LLM", "decode", 0, 1, 300, 350, 0, 0, -1],  # its host took twice as long to reach the next step
        ["LLM", "decode", 0, 1, 400, 460, 0, 80, 1_800],
        ["LLM", "decode", 0, 1, 500, 560, 0, 0, -1],
    ]
    found = discover({"ranges": ranges}, "LLM", ["decode"], 0)
    assert found.every_pace == {"decode": [2e-7, 4e-7, 2e-7, 1e-7, None]}
    assert found.every_wall == {"decode": pytest.approx([7e-8, 6.5e-8, 6.5e-8, 8e-8, 8e-8], rel=1e-12)}
    ranges[3][7] = 0  # clocked, the GPU idle at its end: its host span is its wall, nothing beyond it
    assert discover({"ranges": ranges}, "LLM", ["decode"], 0).every_wall == {
        "decode": pytest.approx([7e-8, 5.5e-8, 5.5e-8, 6e-8, 6e-8], rel=1e-12)
    }


def test_a_short_run_with_no_clocked_step_takes_its_walls_tail_from_its_stages_clocked_steps_around_it():
    """A run of a few decode steps between two prefills may have no step clocked (one in EVERY is): its steps' walls
    are their host spans (50 and 40 ns) and the mean of what the nearest clocked decode steps of the thread, in the
    runs before and after, held on the GPU beyond their host spans (30 and 10): 70 and 60, not the host spans alone.
    Another thread's clocked step is not a neighbour; a stage with no clocked step keeps its host spans."""
    ranges = [
        ["LLM", "decode", 0, 1, 0, 60, 0, 90, 1_000],  # clocked: 30 beyond its host span
        ["LLM", "prefill", 0, 1, 100, 200],
        ["LLM", "decode", 0, 1, 300, 350],  # the short run: none clocked
        ["LLM", "decode", 0, 1, 400, 440],
        ["LLM", "decode", 0, 2, 450, 460, 0, 500, 1_450],  # another thread's: 490 beyond, not a neighbour
        ["LLM", "prefill", 0, 1, 500, 600],
        ["LLM", "decode", 0, 1, 700, 750, 0, 60, 1_700],  # clocked: 10 beyond
    ]
    walls = discover({"ranges": ranges}, "LLM", ["prefill", "decode"], 0).every_wall
    assert walls == {
        "prefill": pytest.approx([1e-7, 1e-7], rel=1e-12),
        "decode": pytest.approx([9e-8, 7e-8, 6e-8, 5e-7, 6e-8], rel=1e-12),
    }


def test_the_timed_run_clocks_the_first_steps_of_each_range_then_one_in_every(monkeypatch):
    from nsightflow.capture.inside import step_clock

    monkeypatch.setattr(step_clock, "EVERY", 8)
    sampler = step_clock.Sampler()
    taken = [n for n in range(40) if sampler.take("decode")]
    assert taken == [0, 1, 2, 3, 4, 5, 6, 7, 15, 23, 31, 39]  # FIRST 8, then one in EVERY 8
    assert sampler.take("prefill")  # another name counts from its own first
    assert not sampler.take("prefill", candidate=False)  # looked at, not a candidate step: not clocked
    assert sampler.seen == {"decode": 12, "prefill": 2}


def test_the_hook_follows_the_programs_child_processes(tmp_path):
    """The settings stay in the environment: every Python process the command starts (a rank of torchrun) loads the
    hook and writes its own record; the process that opened the ranges is the one that has them."""
    from nsightflow.capture.inside.hook_settings import HookSettings, record_path
    from nsightflow.capture.launch.command_call import CommandCall
    from nsightflow.capture.launch.discovery import primary

    child = tmp_path / "child.py"
    child.write_text("import os, nvtx\nwith nvtx.annotate('work', domain='D'):\n    print(os.getpid())\n")
    parent = tmp_path / "parent.py"
    parent.write_text(f"import subprocess, sys\nsubprocess.run([sys.executable, {str(child)!r}], check=True)\n")
    call = CommandCall(command=[sys.executable, str(parent)])
    launch = call.launch(HookSettings("timed", str(tmp_path / "rec.json")), tmp_path)
    import subprocess

    out = subprocess.run(launch.argv, env={**os.environ, **launch.env}, capture_output=True, text=True, check=True)
    child_pid = int(out.stdout.strip())
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rec.*.json"))]
    assert len(records) == 2 and record_path(tmp_path / "rec.json", child_pid).exists()
    ranged = primary(records, 0)
    assert ranged["pid"] == child_pid and [r[:2] for r in ranged["ranges"]] == [["D", "work"]]


def test_code_planted_for_the_hook_never_runs(tmp_path):
    """The hook's sitecustomize lives in a folder of the run only: a sitecustomize planted where an earlier release
    put it (a predictable name in the shared temporary folder) is not on the command's path, and a hook folder that
    is another user's, a symbolic link or writable by others is refused before anything runs."""
    import shutil
    import stat
    import subprocess
    import tempfile

    from nsightflow.capture.inside.hook_settings import HookSettings
    from nsightflow.capture.launch.command_call import CommandCall
    from nsightflow.errors import CaptureError

    planted = []
    for folder in [Path(tempfile.gettempdir()) / f"nsightflow-site-{os.getuid()}-planted", tmp_path / "elsewhere"]:
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w').write('ran')\n")
        planted.append(folder)
    try:
        program = tmp_path / "program.py"
        program.write_text("print('done')\n")
        call = CommandCall(command=[sys.executable, str(program)])
        run = tmp_path / "run"
        run.mkdir(mode=0o700)
        launch = call.launch(HookSettings("timed", str(run / "rec.json")), run)
        site = run / "nsightflow-site"
        assert launch.env["PYTHONPATH"].split(os.pathsep)[0] == str(site)
        assert stat.S_IMODE(site.stat().st_mode) == 0o700 and site.stat().st_uid == os.getuid()
        out = subprocess.run(launch.argv, env={**os.environ, **launch.env}, capture_output=True, text=True, check=True)
        assert out.stdout == "done\n" and len(list(run.glob("rec.*.json"))) == 1  # the hook ran, from the run's folder
        assert not (tmp_path / "pwned").exists()

        def refused(why: str, make) -> None:
            bad = tmp_path / why
            bad.mkdir()
            make(bad)
            with pytest.raises(CaptureError, match="not private") as err:
                call.launch(HookSettings("timed", str(bad / "rec.json")), bad)
            assert str(bad / "nsightflow-site") in str(err.value) and "Remove it" in str(err.value)

        refused(
            "writable", lambda d: (d / "nsightflow-site").mkdir(mode=0o777) or os.chmod(d / "nsightflow-site", 0o777)
        )
        refused("symlink", lambda d: (d / "nsightflow-site").symlink_to(planted[1]))
        if os.getuid() == 0:  # a folder another user made (as root, the test can make one)
            refused(
                "foreign",
                lambda d: (d / "nsightflow-site").mkdir(mode=0o700) or os.chown(d / "nsightflow-site", 65534, 65534),
            )
        assert not (tmp_path / "pwned").exists()
        assert (planted[1] / "sitecustomize.py").read_text().startswith("open(")  # a linked folder is never written
    finally:
        shutil.rmtree(planted[0], ignore_errors=True)


@pytest.mark.parametrize("work, warmups", [([], [0, 1]), (["torch.compile made 1 graph(s)"], [1]), (None, [1])])
def test_ncu_windows_a_callables_first_pass_only_where_the_timeline_saw_no_one_time_work(tmp_path, work, warmups):
    from nsightflow.capture.inside.harness import HarnessCall
    from nsightflow.capture.launch.program import ncu_launches
    from nsightflow.records import Manifest

    Manifest(callable="workloads:first_use_state", first_pass_work=work).write(tmp_path / "manifest.json")
    fields = {"spec": "workloads:first_use_state", "args": {}, "warmup": 1}
    got = ncu_launches(fields, tmp_path / "plan.json", tmp_path / "manifest.json", False)
    calls = [HarnessCall.parse(launch.argv[3:]) for launch in got]
    assert [c.warmup for c in calls] == warmups  # the last one always warms up as configured
    assert all(c.windows == str((tmp_path / "plan.json").resolve()) for c in calls)
    assert not any(launch.awaits_plan or c.await_windows for launch, c in zip(got, calls, strict=True))
    # its plan made while ncu starts: each launch waits for it (the harness's --await-windows)
    got = ncu_launches(fields, tmp_path / "plan.json", tmp_path / "manifest.json", True)
    calls = [HarnessCall.parse(launch.argv[3:]) for launch in got]
    assert all(launch.awaits_plan and c.await_windows for launch, c in zip(got, calls, strict=True))
    assert [c.warmup for c in calls] == warmups
    # warm-up 0 configured: the timeline's launch had none either, so neither has ncu's
    Manifest(first_pass_work=None).write(tmp_path / "manifest.json")
    got = ncu_launches({**fields, "warmup": 0}, tmp_path / "plan.json", tmp_path / "manifest.json", False)
    assert [HarnessCall.parse(launch.argv[3:]).warmup for launch in got] == [0]


AWAITING_PROGRAM = """
import sys, time
import nvtx
from pathlib import Path
log = Path(sys.argv[1])
log.write_text("started\\n")  # its start-up (a model's build, say) runs before the plan exists
for step in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    with nvtx.annotate("work", domain="D"):
        with log.open("a") as f:
            print(f"step {step}", file=f)
"""


def test_a_commands_ncu_launch_starts_before_its_plan_and_waits_for_it_at_its_first_step(tmp_path):
    """ncu_capture makes a command's plan while ncu starts the program (Launch.awaits_plan): the program's start-up
    runs meanwhile, and the hook holds its first step until the plan is published, so no window can open before
    the plan says where."""
    from nsightflow import files
    from nsightflow.capture.launch.program import ncu_launches
    from nsightflow.records import Manifest

    Manifest(stage_domain="D", stages=[{"name": "work"}]).write(tmp_path / "manifest.json")
    (tmp_path / "program.py").write_text(AWAITING_PROGRAM)
    log, plan = tmp_path / "log.txt", tmp_path / "plan.json"
    fields = {"command": [sys.executable, str(tmp_path / "program.py"), str(log)]}
    assert [launch.awaits_plan for launch in ncu_launches(fields, plan, tmp_path / "manifest.json", False)] == [False]
    (launch,) = ncu_launches(fields, plan, tmp_path / "manifest.json", True)
    assert launch.awaits_plan
    proc = subprocess.Popen(launch.argv, env={**os.environ, **launch.env}, cwd=launch.cwd)
    try:
        deadline = time.monotonic() + 120
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        assert proc.poll() is None and log.read_text() == "started\n"  # at its first step, waiting
        staged = files.staging(plan)  # as the job publishes it: written whole, then renamed into place
        staged.write_text(json.dumps({"windows": [{"stage": "work", "step": 99, "units": None}]}))
        files.publish(staged, plan)
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    assert log.read_text().splitlines() == ["started", "step 0", "step 1", "step 2"]


@pytest.mark.parametrize("world, ran", [(None, 2), ("2", 5)])
def test_a_commands_ncu_launch_ends_after_its_plans_last_window_unless_one_of_several_ranks(tmp_path, world, ran):
    """Nothing after the plan's last window is measured: ncu's launch of a program that computes alone ends there (a
    server's window of a long run would otherwise run to its end at ncu's pace); one rank of several runs on, its
    peers waiting for it in their collectives. (A window whose units open no profiler: none runs on a CPU.)"""
    from nsightflow.capture.launch.program import ncu_launches
    from nsightflow.records import Manifest

    Manifest(stage_domain="D", stages=[{"name": "work"}]).write(tmp_path / "manifest.json")
    (tmp_path / "program.py").write_text(AWAITING_PROGRAM)
    log, plan = tmp_path / "log.txt", tmp_path / "plan.json"
    plan.write_text(json.dumps({"windows": [{"stage": "work", "step": 1, "units": []}]}))
    fields = {"command": [sys.executable, str(tmp_path / "program.py"), str(log), "5"]}
    (launch,) = ncu_launches(fields, plan, tmp_path / "manifest.json", False)
    env = {**os.environ, **launch.env}
    env.pop("WORLD_SIZE", None)
    if world is not None:
        env["WORLD_SIZE"] = world
    done = subprocess.run(launch.argv, env=env, cwd=launch.cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["started"] + [f"step {i}" for i in range(ran)]
    assert ("last window has ended" in done.stderr) == (world is None)


@pytest.mark.parametrize(
    "gpus, env, expect",
    [
        (1, {}, {}),
        (2, {}, {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}),
        (2, {"NCCL_P2P_DISABLE": 0}, {"NCCL_P2P_DISABLE": "0", "NCCL_NVLS_ENABLE": "0"}),
    ],
)
def test_ncu_launch_of_several_gpus_runs_nccl_with_no_peer_writes_and_nsys_as_configured(tmp_path, gpus, env, expect):
    # nanoGPT under torchrun hung in 2 of 3 ncu launches on two GPUs, in none of 6 with peer-to-peer off; the
    # explanation that fits (not proven): ncu's replay restores the profiled rank's memory, undoing a peer's writes
    from nsightflow.capture.inside.hook_settings import HookSettings
    from nsightflow.capture.launch.command_call import CommandCall
    from nsightflow.capture.launch.program import ncu_launches
    from nsightflow.records import Manifest

    Manifest(stage_domain="D", stages=[{"name": "work"}]).write(tmp_path / "manifest.json")
    fields = {"command": [sys.executable, "program.py"], "gpus": gpus, "env": env}
    (launch,) = ncu_launches(fields, tmp_path / "plan.json", tmp_path / "manifest.json", False)
    nccl = {k: v for k, v in launch.env.items() if k.startswith("NCCL_")}
    assert nccl == expect and launch.gpus == gpus
    timeline = CommandCall(**fields).launch(HookSettings("nsys", None), tmp_path)
    assert {k: v for k, v in timeline.env.items() if k.startswith("NCCL_")} == {k: str(v) for k, v in env.items()}


def test_stage_ranges_in_a_worker_thread_are_profiled_under_torch_profiler(tmp_path):
    """torch.profiler is thread-local: it starts and stops on the thread of the steps (kineto killed the process with
    SIGSEGV when it was stopped from the main thread at exit)."""
    steps, n = 4, 64
    argv = [
        sys.executable,
        str(ROOT / "tests" / "programs" / "threaded_steps.py"),
        "--steps",
        str(steps),
        "--n",
        str(n),
    ]
    work = torch_workflow(tmp_path, [{"name": "threaded", "command": argv}])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "threaded"
    decode = steady_steps(run, "decode", steps)
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert int(stages.loc["decode", "range_instances"]) == decode
    assert stages.loc["decode", "flops_analytic"] == decode * 2 * n**3
    kernels = pd.read_csv(run / "kernels.csv").set_index("kernel")  # the trace's operators, inside its steps
    assert kernels.loc["aten::mm", "instances"] == decode and kernels.loc["aten::tanh", "instances"] == decode


MEMORY_PROGRAM = """
import nvtx, torch
for _ in range(3):
    with nvtx.annotate("big", domain="M"):
        x = torch.ones(64 << 20)  # 256 MiB of float32, written: resident while the step runs
        del x
    with nvtx.annotate("small", domain="M"):
        y = torch.ones(1 << 18)  # 1 MiB
        del y
"""


def test_a_commands_peak_memory_per_stage_is_measured_outside_its_timed_run(tmp_path):
    """The timed run does nothing at a command's steps (they keep the program's pace); its peak memory per stage
    comes from a run whose steps end synchronized anyway (here, on the torch.profiler path, the count run): the
    process's resident peak during the step that holds 256 MiB more than the other stands that much above it."""
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_PROGRAM)
    work = torch_workflow(tmp_path, [{"name": "mem", "command": [sys.executable, str(script)], "warmup_steps": 0}])
    snakemake(work, "--cores", "1", "results/report.html")
    stages = pd.read_csv(work / "results" / "mem" / "stages.csv").set_index("stage")
    big, small = stages.loc["big", "memory_rss_peak"], stages.loc["small", "memory_rss_peak"]
    assert small > 0 and big - small > 0.9 * (256 << 20), (big, small)


THREADS_PROGRAM = """
import os, sys
import nvtx, torch
with open(sys.argv[1], "a") as f:
    print(os.environ.get("OMP_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS"), torch.get_num_threads(), file=f)
x = torch.randn(64, 64)
for _ in range(2):
    with nvtx.annotate("step", domain="T"):
        x = x @ x / 64
"""


@pytest.mark.parametrize("user", [None, "3"])
def test_the_program_keeps_the_users_thread_settings_not_the_jobs(tmp_path, user):
    """Snakemake sets OMP_NUM_THREADS and five more to a job's ``threads`` in every job: the profiled program gets
    the user's own values back (here: unset, or 3), in every launch, so it runs as it runs alone."""
    seen = tmp_path / "seen.txt"
    (tmp_path / "threads.py").write_text(THREADS_PROGRAM)
    work = torch_workflow(
        tmp_path, [{"name": "threads", "command": [sys.executable, str(tmp_path / "threads.py"), str(seen)]}]
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env.pop("NSIGHTFLOW_HOST_FACTS", None)
    if user is not None:
        env["OMP_NUM_THREADS"] = user
    snakemake(work, "--cores", "2", "results/report.html", env=env)
    lines = seen.read_text().splitlines()
    assert len(lines) >= 2  # the timed run, the profiled one (and the count run)
    plain = tmp_path / "plain.txt"  # the program run alone, from the same environment
    subprocess.run([sys.executable, str(tmp_path / "threads.py"), str(plain)], env=env, check=True)
    assert plain.read_text().split()[:2] == [str(user), "None"]
    assert all(line == plain.read_text().strip() for line in lines), lines


LITTER_PROGRAM = """
import os, sys, tempfile
import nvtx, torch
handle, path = tempfile.mkstemp(prefix="left-")  # a file the program never removes, as torchrun's logs
with open(sys.argv[1], "a") as f:
    print(path, os.environ.get("TORCHINDUCTOR_CACHE_DIR"), file=f)
x = torch.randn(64, 64)
for _ in range(2):
    with nvtx.annotate("step", domain="T"):
        x = x @ x / 64
"""


def test_a_users_inductor_cache_folder_is_kept(tmp_path, monkeypatch):
    """A ``TORCHINDUCTOR_CACHE_DIR`` the user set reaches the program unchanged (only ``TMPDIR`` is the job's);
    without one, the program gets torch's default for the machine's temporary folder, not the job's."""
    from nsightflow.capture.launch.hook_site import program_tmp

    (tmp_path / "machine").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "machine"))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    env = program_tmp(tmp_path / "private")
    assert env == {
        "TMPDIR": str((tmp_path / "private" / "tmp").resolve()),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "machine" / f"torchinductor_{getpass.getuser()}"),
    }
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert "TORCHINDUCTOR_CACHE_DIR" not in program_tmp(tmp_path / "private")  # the user's own stays in place


def test_what_a_command_leaves_in_its_temporary_folder_goes_with_the_job(tmp_path):
    """A command's processes get a temporary folder of the job's own, inside the run's folder and removed with the
    job, so the files a program (or torchrun) leaves in TMPDIR never pile up in the machine's /tmp, one per launch;
    torch's compile cache stays where the program run plainly keeps it."""
    seen, machine_tmp = tmp_path / "seen.txt", tmp_path / "machine-tmp"
    machine_tmp.mkdir()
    (tmp_path / "litter.py").write_text(LITTER_PROGRAM)
    work = torch_workflow(
        tmp_path, [{"name": "litter", "command": [sys.executable, str(tmp_path / "litter.py"), str(seen)]}]
    )
    # torch's default cache folder: no TORCHINDUCTOR_CACHE_DIR (this test process has one once anything in it
    # imported torch._inductor, which sets it)
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"} | {"TMPDIR": str(machine_tmp)}
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    lines = [line.split() for line in seen.read_text().splitlines()]
    assert len(lines) >= 2  # the timed run, the profiled one (and the count run)
    run = (work / "results" / "litter").resolve()
    for left, cache in lines:
        assert Path(left).is_relative_to(run), left  # made in the run's own folder
        assert not Path(left).exists()  # and gone with the job
        assert cache == str(machine_tmp / f"torchinductor_{getpass.getuser()}")
    assert [p.name for p in machine_tmp.iterdir() if not p.name.startswith("torchinductor_")] == []


def test_a_loop_without_ranges_has_its_steps_from_the_functions_it_names(tmp_path):
    """config step_functions: each call of a named function is one step of its stage, as a serving engine's
    iterations are, in a program that opens no range; a call inside another step function's call is part of that
    step. Expected FLOPs from the shapes: two matrices of hidden x 4·hidden per row, 2 FLOPs a multiply-add."""
    hidden, prompt, batch, steps = 64, 32, 4, 5
    folder = ROOT / "tests" / "programs" / "stepper"
    argv = [sys.executable, "serve.py", "--hidden", str(hidden), "--prompt", str(prompt)]
    argv += ["--batch", str(batch), "--steps", str(steps)]
    functions = {"prefill": "engine:Engine.prefill", "decode": "engine:Engine.step"}
    work = torch_workflow(
        tmp_path, [{"name": "loop", "command": argv, "cwd": str(folder), "step_functions": functions}]
    )
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "loop"
    manifest = json.loads((run / "manifest.json").read_text())
    assert [s["name"] for s in manifest["stages"]] == ["prefill", "decode"]
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    per_row = 2 * 2 * hidden * 4 * hidden
    decode = steady_steps(run, "decode", steps)
    assert int(stages.loc["prefill", "range_instances"]) == steady_steps(run, "prefill", 1) == 1
    assert stages.loc["prefill", "flops_analytic"] == prompt * per_row  # its inner step call is not a decode step
    assert stages.loc["decode", "flops_analytic"] == decode * batch * per_row


def test_a_window_profiles_only_its_steps_of_a_long_loop(tmp_path):
    """config window: a loop of 200 steps (one prefill call, then 199 decode calls: the program's steps 0 to 199 in
    the order they ran), only steps 21 to 40 profiled: every step timed, the others set apart and named, the stage
    that never ran inside the window (prefill) not a stage, and torch.profiler running only from the window's first
    step to its last: its trace holds 20 steps and the matrix products of 20 steps, none from outside; the launches
    after the timed one end after the window's last step. Expected from the loop's shapes: two products per step, 2
    FLOPs a multiply-add."""
    hidden, batch, steps, start, n = 32, 4, 199, 21, 20
    folder = ROOT / "tests" / "programs" / "stepper"
    argv = [sys.executable, "serve.py", "--hidden", str(hidden), "--batch", str(batch), "--steps", str(steps)]
    functions = {"prefill": "engine:Engine.prefill", "decode": "engine:Engine.step"}
    workload = {"name": "loop", "command": argv, "cwd": str(folder), "step_functions": functions}
    work = torch_workflow(tmp_path, [{**workload, "window": {"start": start, "steps": n}}])
    began = time.time()
    snakemake(work, "--cores", "1", "results/report.html")
    ended = time.time()
    run = work / "results" / "loop"
    manifest = json.loads((run / "manifest.json").read_text())
    assert [s["name"] for s in manifest["stages"]] == ["decode"]
    assert len(manifest["every_wall_s"]["decode"]) == steps  # every step timed
    apart = {w["step"] for w in manifest["warmup_steps"] if w["why"].startswith("outside the workload's window")}
    assert set(range(steps)) - apart == set(range(start - 1, start - 1 + n))  # decode ordinal = program ordinal - 1
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    assert int(stages.loc["decode", "range_instances"]) == n
    assert stages.loc["decode", "flops_analytic"] == n * batch * 2 * 2 * hidden * 4 * hidden
    events = json.loads((run / "torch" / "trace.json").read_text())["traceEvents"]
    names = Counter(e.get("name") for e in events if e.get("ph") == "X")
    label = next(k for k in names if k and k.startswith("nsightflow:") and k.endswith("decode"))
    assert names[label] == n and names["aten::mm"] == 2 * n, {k: v for k, v in names.items() if "mm" in str(k)}
    page = (run / "report.html").read_text()
    assert f"{steps - n} step(s) outside the workload&#x27;s window (steps 0 to 19, 40 to {steps - 1})" in page
    # the timed run serves every step; the launches under torch.profiler and for the count end after the window's
    log = (run / "logs" / "torch_profile.log").read_text()
    assert log.count(f"served {steps} steps") == 1 and log.count("the window's last step has ended") == 2
    # when each launch's program ran, on the wall clock: the timed run's, then the one under torch.profiler
    spans = re.search(
        r"timed run's program ran from ([\d.]+) to ([\d.]+); under torch.profiler from ([\d.]+) to ([\d.]+)", log
    )
    assert spans is not None, log[-2000:]
    t0, t1, p0, p1 = map(float, spans.groups())
    assert began < t0 < t1 <= p0 < p1 < ended


def test_a_serving_loops_steps_are_grouped_by_their_batch_mix(tmp_path):
    """config step_inputs: each decode step's inputs summarised by the program's own function (rows in the batch);
    steps.csv has every step's wall, model FLOPs and batch mix, and the run page groups the steady steps by mix.
    Expected from the loop's schedule and shapes: rows_i · 2 products · hidden x 4·hidden, 2 FLOPs a multiply-add.
    The engine waits 8 ms a step and 60 ms more in the first step of each batch size (its lazy work per new shape):
    the automatic warm-up rule, judging each mix's steps among themselves, sets apart exactly those first steps,
    the fourth step among them (a rule over all steps at once stops at the third, a steady one)."""
    hidden, schedule, steps = 32, [2, 8, 8, 4], 12
    folder = ROOT / "tests" / "programs" / "stepper"
    argv = [sys.executable, "serve.py", "--hidden", str(hidden), "--steps", str(steps)]
    argv += ["--batches", ",".join(map(str, schedule)), "--pause-ms", "8", "--first-ms", "60"]
    workload = {"name": "mixes", "command": argv, "cwd": str(folder)}  # warmup_steps: auto, the default
    functions = {"prefill": "engine:Engine.prefill", "decode": "engine:Engine.step"}
    workload |= {"step_functions": functions, "step_inputs": {"decode": "mixes:rows"}}
    work = torch_workflow(tmp_path, [workload])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "mixes"
    rows = [schedule[i % len(schedule)] for i in range(steps)]
    firsts = [rows.index(r) for r in sorted(set(rows), key=rows.index)]  # each batch size's first step: 0, 1, 3
    table = pd.read_csv(run / "steps.csv", keep_default_na=False)
    assert list(table.loc[table["stage"] == "prefill", "mix"]) == [""]  # no summary function: no mix
    assert table.loc[table["stage"] == "prefill", "steady"].all()  # one step: nothing to compare it with
    table = table[table["stage"] == "decode"]
    assert list(table["step"]) == list(range(steps)) and list(table["mix"]) == [f"rows={r}" for r in rows]
    manifest = json.loads((run / "manifest.json").read_text())
    apart = [w for w in manifest["warmup_steps"] if w["stage"] == "decode"]
    assert [w["step"] for w in apart] == firsts == [i for i in range(steps) if not table["steady"].iloc[i]]
    assert all(f"the steady median rows={rows[w['step']]} step" in w["why"] for w in apart)
    steady = table[table["steady"]]
    assert [float(f) for f in steady["flops_model"]] == [rows[i] * 2 * 2 * hidden * 4 * hidden for i in steady["step"]]
    assert list(table["wall_ms"]) == pytest.approx([w * 1e3 for w in manifest["every_wall_s"]["decode"]])
    page = (run / "report.html").read_text()
    assert "Steps by batch mix" in page
    for r in sorted(set(rows)):
        assert f"<td class='label'>rows={r}</td><td>{rows.count(r) - 1}</td>" in page


def test_a_step_summary_that_fails_is_unread_never_made_up():
    from nsightflow.capture.inside.hook_steps import StepInputs

    inputs = StepInputs({"decode": "builtins:dict", "prefill": "json:dumps"})
    inputs.summarise("decode", (), {"rows": 3})
    inputs.summarise("decode", ({"rows": True},), {})  # a bool is no count
    inputs.summarise("prefill", ([1],), {})  # a string, not a dict
    inputs.summarise("other", (), {})  # a stage with no summary function: nothing kept
    got = inputs.record()
    assert got["step_inputs"] == {"decode": [{"rows": 3.0}, None], "prefill": [None]}
    assert got["step_inputs_errors"]["prefill"].startswith("json:dumps: TypeError: returned str")
    assert set(got["step_inputs_errors"]) == {"decode", "prefill"}


def test_step_inputs_summarise_a_step_function():
    with pytest.raises(ConfigError, match="step_inputs: prefill name"):
        check(_config(command=["python", "serve.py"], step_functions={"decode": "e:E.step"},
                      step_inputs={"prefill": "m:f"}), SCHEMA)  # fmt: skip


def test_a_window_outside_the_run_names_the_fix():
    ranges = [["", "step", 0, 1, 100 * i, 100 * i + 50] for i in range(5)]
    with pytest.raises(WorkloadError, match="holds none of the 5 steps the program ran: start it at most at step 4"):
        discover({"ranges": ranges}, "", ["step"], window=Window(5, 3))
    found = discover({"ranges": ranges}, "", ["step"], 0, window=Window(3, 10))
    assert found.walls == {"step": [5e-8, 5e-8]} and found.skip == {"step": [0, 1, 2]}
    assert found.last_steps() == {"step": 5}
    with pytest.raises(ConfigError, match="window apply to a command: workload only"):
        check(_config(callable="a.b:c", window={"start": 0, "steps": 1}), SCHEMA)
    with pytest.raises(ConfigError, match="steps"):
        check(_config(command=["python", "serve.py"], window={"start": 0, "steps": 0}), SCHEMA)


def test_step_functions_name_the_stages_alone(tmp_path):
    functions = {"decode": "engine:Engine.step"}
    with pytest.raises(ConfigError, match="keep one of the two"):
        check(_config(command=["python", "serve.py"], step_functions=functions, stages=["decode"]), SCHEMA)
    with pytest.raises(ConfigError, match="step_functions"):
        check(_config(command=["python", "serve.py"], step_functions={"decode": "engine.Engine.step"}), SCHEMA)
    with pytest.raises(ConfigError, match="apply to a command: workload only"):
        check(_config(callable="a.b:c", step_functions=functions), SCHEMA)


@pytest.mark.gpu
def test_a_timed_steps_wall_is_its_work_on_the_gpu_with_no_wait():
    """The timed run's clock (nsightflow.capture.inside.step_clock): a range that queues a few milliseconds of GPU work
    and returns at once has the GPU's time for that work as its wall, read without the host waiting at its end; the
    next range, queued behind it, starts on the GPU's clock when that work ends (a step's pace)."""
    import time

    import torch

    from nsightflow.capture.inside import step_clock

    torch.cuda.init()
    torch.cuda._sleep(1_000)  # its kernel loaded (lazily, on first use) before anything is timed
    torch.cuda.synchronize()
    spans = step_clock.GpuSpans()
    began = time.perf_counter()
    start = step_clock.mark()
    torch.cuda._sleep(1_000_000)  # cycles: under a millisecond at a GPU's clock; five of them
    for _ in range(4):
        torch.cuda._sleep(1_000_000)
    end = step_clock.end_mark()  # the GPU still runs the range's work: an event, not the host's end
    host_s = time.perf_counter() - began
    spans.add(0, start, end)
    nxt = step_clock.mark()  # the next range, queued behind the first's work: it starts on the GPU when that ends
    torch.cuda._sleep(1_000_000)
    spans.add(1, nxt, step_clock.mark())
    settled = spans.settle(wait=True)
    gpu_s, at_s = settled[0][0] / 1e9, settled[1][1] / 1e9
    probe = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe[0].record()
    torch.cuda._sleep(5_000_000)
    probe[1].record()
    torch.cuda.synchronize()
    alone_s = probe[0].elapsed_time(probe[1]) / 1e3
    print(f"queued in {host_s * 1e3:.3f} ms; its wall {gpu_s * 1e3:.3f} ms; the same work alone {alone_s * 1e3:.3f} ms")
    print(f"the next range started {at_s * 1e3:.3f} ms after the first (its pace)")
    torch.cuda._sleep(1_000)
    torch.cuda.synchronize()
    assert step_clock.end_mark() is None  # nothing left to run: the range ended with its host span
    assert host_s < 0.5 * gpu_s and gpu_s == pytest.approx(alone_s, rel=0.05)
    assert settled[0][1] == 0 and at_s == pytest.approx(gpu_s, rel=0.05)
    # A child forked with the clock's read events cached (a subprocess with a preexec_fn, as nsightflow's own runs
    # start theirs) starts: the parent's events are not destroyed there (their destructors call CUDA, which aborted
    # such a child on the GPU host).
    assert step_clock._FREE
    done = subprocess.run([sys.executable, "-c", "print('started')"], preexec_fn=os.getpid, capture_output=True)
    assert (done.returncode, done.stdout) == (0, b"started\n"), done.stderr.decode()[-2000:]


def test_a_forked_child_starts_with_no_events_and_destroys_none_of_its_parents():
    """A child forked after the timed run has cached events (nsightflow.capture.inside.step_clock) starts with an empty
    cache, and the parent's events are never destroyed in it: a CUDA event's destructor calls CUDA, which fails in a
    child forked after CUDA's initialisation, and torch aborted such a child on the GPU host (the GPU test above runs a
    real one), nor are a range's events still pending. An object standing for an event tells, from its destructor,
    whether the child destroyed it. The same for the timed hook's log (nsightflow.capture.inside.hook_timed): a
    clocked range's events logged and not yet rebuilt, and one open: the child keeps their ranges' host times only."""
    import gc

    from nsightflow.capture.inside import step_clock
    from nsightflow.capture.inside.hook_settings import HookSettings
    from nsightflow.capture.inside.hook_timed import TimedTracker

    read, write = os.pipe()

    class Event:
        def __del__(self) -> None:
            os.write(write, b"destroyed;")

    step_clock._FREE.setdefault(0, []).append(Event())
    step_clock._STREAMS[(0, 0, 1)] = Event()
    spans = step_clock.GpuSpans()  # a range's events still pending (not yet read) when the program forks
    spans.origin = start = Event()
    spans.pending.append((0, start, Event()))
    tracker = TimedTracker(HookSettings("timed", ""))
    tracker.open[7] = [(0, 7, "LLM", "outer", 0, Event())]  # a clocked range open (rebuilt), thread 7's
    tracker.events += [(1, 7, "LLM", "decode", 0, Event()), (2, 7, "LLM", 0, Event())]  # one logged, ended
    tracker.open_clocked = 1
    pid = os.fork()
    if pid == 0:  # the child: exits through os._exit (as a forked worker does), after a full collection
        gc.collect()
        empty = step_clock._FREE == step_clock._STREAMS == {} and not spans.pending and spans.origin is None
        rows = tracker.rows()
        logged = [e[-1] for e in tracker.open[7]] == [None] and tracker.open_clocked == 0 and not tracker.gpu.pending
        logged = logged and [r[:3] for r in rows] == [("LLM", "decode", 1)]
        os.write(write, b"empty;" if empty and logged else b"kept;")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    os.write(write, b"end;")
    told = b""
    while not told.endswith(b"end;"):
        told += os.read(read, 100)
    step_clock._FREE.clear()  # the parent's own: destroyed here, as they would be at its exit
    step_clock._STREAMS.clear()
    del spans, start, tracker
    gc.collect()
    os.close(write)
    os.close(read)
    assert status == 0 and told == b"empty;end;"


def test_threads_pushing_ranges_at_once_keep_each_ranges_gpu_events(monkeypatch):
    """The timed hook's ranges from several threads at once (a serving engine's thread beside the main one), thread
    switches forced every microsecond: each range is rebuilt once from the log, at its depth, and the GPU events of
    its start and end are kept under its own row (a push logs without a lock unless its name is due a look, a pop
    unless a clocked range is open). The clock's events are stand-ins naming the thread and its count of them (no
    CUDA here). A range of a name seen once per thread is always looked at (each name's first FIRST are), so each
    is clocked where it is a candidate; a name pushed every iteration is looked at one time in EVERY after those."""
    import threading

    from nsightflow.capture.inside import hook_install, step_clock
    from nsightflow.capture.inside.hook_settings import HookSettings

    made: dict[int, int] = {}  # thread -> marks made

    def mark() -> tuple[int, int]:
        tid = threading.get_ident()
        made[tid] = made.get(tid, 0) + 1
        return (tid, made[tid] - 1)

    monkeypatch.setattr(step_clock, "mark", mark)
    monkeypatch.setattr(step_clock, "end_mark", lambda: "end")
    monkeypatch.setattr(step_clock, "release", lambda event: None)  # a pop's end event that ends no clocked range
    tracker = hook_install.tracker_for(HookSettings("timed", ""))
    added: list[tuple[int, object, object]] = []
    monkeypatch.setattr(tracker.gpu, "add", lambda key, start, end: added.append((key, start, end)))
    per, threads = 3000, 4

    def loop() -> None:
        for i in range(per):  # a top-level range, a nested one of its domain (never clocked), one of another domain
            tracker.push("LLM", "step")
            tracker.push("LLM", "sub")
            tracker.push("inner", f"{threading.get_ident()} {i}")  # its own name: every one clocked
            tracker.pop("inner")
            tracker.pop("LLM")
            tracker.pop("LLM")

    was = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=loop) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(was)
    ranges = tracker.rows()
    assert len(ranges) == 3 * per * threads and len(added) == sum(made.values())
    depths = Counter((r[0], r[2]) for r in ranges)
    assert depths == {("LLM", 0): per * threads, ("LLM", 1): per * threads, ("inner", 0): per * threads}
    assert len({key for key, *_ in added}) == len(added)
    clocked = Counter(ranges[key][:3] for key, *_ in added)
    steps = per * threads  # a look at the first FIRST, then about one in EVERY (threads may miss a count down)
    assert clocked[("LLM", "step", 0)] in range(step_clock.FIRST, steps // step_clock.EVERY + step_clock.FIRST + 1)
    assert sum(v for k, v in clocked.items() if k[0] == "inner") == per * threads
    assert set(clocked) - {("LLM", "step", 0)} == {r[:3] for r in ranges if r[0] == "inner"}
    for tid in made:  # a thread's k-th mark is on its k-th clocked range: their rows in that order, in its thread
        mine = sorted((n, key) for key, (t, n), end in added if t == tid)
        assert [n for n, _ in mine] == list(range(made[tid])) and all(ranges[k][3] == tid for _, k in mine)
        starts = [ranges[k][4] for _, k in mine]
        assert starts == sorted(starts) and all(end == "end" for *_, end in added)


def test_the_timed_hook_rebuilds_each_range_from_its_log():
    """The timed hook logs pushes and pops and rebuilds the ranges from them: each range's depth in its domain (a pop
    ends its thread's innermost open range of its domain, even under another domain's), the graphs torch.compile made
    while it was open (dynamo's counter at its pop less at its push: here a stand-in counter bumped between the
    calls), a pop that ends no range dropped, a range still open left out."""
    from nsightflow.capture.inside import hook_install
    from nsightflow.capture.inside.hook_settings import HookSettings

    tracker = hook_install.tracker_for(HookSettings("timed", ""))
    stats: Counter[str] = Counter()
    tracker.counters = {"stats": stats}
    tracker.push("LLM", "prefill")
    stats["unique_graphs"] += 2
    tracker.push(None, "inner")  # the default domain
    tracker.push("LLM", "attention")
    stats["unique_graphs"] += 1
    tracker.pop(None)  # ends "inner" though "attention" (another domain) is open inside it
    tracker.pop("LLM")
    tracker.pop("other")  # ends nothing
    tracker.pop("LLM")
    tracker.push("LLM", "decode")
    tracker.pop("LLM")
    tracker.push("LLM", "open at exit")
    got = [(d, n, depth, graphs) for d, n, depth, _, _, _, graphs in tracker.rows()]
    assert got == [("", "inner", 0, 1), ("LLM", "attention", 1, 1), ("LLM", "prefill", 0, 3), ("LLM", "decode", 0, 0)]
    rows = tracker.ranges_record()
    assert [r[7:] for r in rows] == [[0, -1]] * 4  # no CUDA here: nothing on the GPU's clock
    assert all(r[4] <= r[5] for r in rows) and rows[2][4] < rows[1][4] < rows[0][5] <= rows[2][5]
