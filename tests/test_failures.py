"""When things go wrong on the CPU: real failing workloads, bad names, bad files, timeouts, kill -9 and resume."""

import csv
import hashlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import DATA, ROOT, copy_workflow, foreground_workflow, left_in_tmp, process_alive, snakemake

from nsightflow.capture.launch import ncu
from nsightflow.capture.read import ncu_csv, nsys_stats

TESTS = ROOT / "tests"


def _workflow(tmp_path, workloads, **overrides):
    wf = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    cfg["workloads"] = workloads
    for key, value in overrides.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(wf / "tests")}
    return wf, env


@pytest.mark.parametrize(
    "fn,needle",
    [
        ("raises", "raised while building with {}: ValueError('model weights not found at /nowhere')"),
        (
            "stage_raises",
            "stage 'decode' raised at step 1: RuntimeError('CUDA out of memory (simulated by the workload)')",
        ),
        ("idle", "no kernels or operators ran inside the ranges of stage(s) ['prefill']"),
        ("nope", "module 'workloads' has no attribute 'nope'"),
    ],
)
def test_failing_workloads_fail_the_job_with_the_cause(tmp_path, fn, needle):
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": f"workloads:{fn}"}])
    proc = snakemake(wf, "--cores", "1", "results/report.html", check=False, env=env)
    assert proc.returncode != 0 and needle in proc.stdout, proc.stdout[-3000:]
    assert not (wf / "results" / "report.html").exists() and not (wf / "results" / "w" / "stages.csv").exists()
    # The rule's log holds the cause too, with the script's traceback (the terminal may be gone).
    logs = [p.read_text() for p in (wf / "results" / "w" / "logs").glob("*.log")]
    failed = [log for log in logs if "[nsightflow] the job failed: " in log]
    assert len(failed) == 1 and needle in failed[0] and "Traceback" in failed[0]


def test_names_with_shell_and_nvtx_characters_reach_the_tools_intact(tmp_path):
    from workloads import WEIRD

    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:weird_names"}])
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    stages = list(csv.DictReader((wf / "results" / "w" / "stages.csv").open()))
    assert [r["stage"] for r in stages] == [WEIRD] and int(stages[0]["range_instances"]) == 2
    assert not list(wf.rglob("pwned"))  # no shell ever ran the name
    page = (wf / "results" / "w" / "report.html").read_text()
    assert "say &quot;hi&quot;; $(touch pwned)" in page
    # On the Nsight path no stage name reaches ncu's command line at all: the harness reads the plan's
    # windows (JSON) and opens them itself, so the name round-trips exactly.
    from nsightflow.capture.inside.harness import read_windows
    from nsightflow.capture.read.plan import CapturePlan, Window

    plan_json = tmp_path / "plan.json"
    CapturePlan("representatives", "nsightflow", [Window(WEIRD, 1, [3, 4], "test")], []).write(plan_json)
    argv = ncu.capture_argv(
        "ncu",
        "o",
        ["python", "-m", "nsightflow.capture.inside.harness", "--windows", str(plan_json)],
        replay_mode="kernel",
        clock_control="none",
        cache_control="all",
    )
    assert not any(WEIRD in a or "pwned" in a for a in argv)
    assert read_windows(plan_json).plan == {(WEIRD, 1): {3, 4}}


def test_stage_names_are_never_merged_or_renamed(tmp_path):
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:awkward_names"}])
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    stages = {r["stage"]: r for r in csv.DictReader((wf / "results" / "w" / "stages.csv").open(encoding="utf-8"))}
    assert set(stages) == {"préfill", "décode", 'a"b', "0 préfill"}  # no "unknown", no merge
    assert int(stages["décode"]["range_instances"]) == 2 and int(stages["préfill"]["range_instances"]) == 1
    assert all(float(r["flops_analytic"]) == 2 * 64 * 64 * 64 for n, r in stages.items() if n != "décode")


def test_a_hung_workload_is_stopped_by_the_timeout(tmp_path):
    wf, env = _workflow(
        tmp_path,
        [{"name": "w", "callable": "workloads:slow", "args": {"marker": str(tmp_path / "m"), "seconds": 120}}],
        torch={"timeout_s": 3},
    )
    start = time.time()
    proc = snakemake(wf, "--cores", "1", "results/report.html", check=False, env=env)
    assert proc.returncode != 0 and "did not finish within 3 s (config: timeout_s)" in proc.stdout
    assert time.time() - start < 60


def test_bad_files_are_refused_with_the_cause(tmp_path):
    rows = (DATA / "h200_tinyllm" / "prefill.raw.csv").read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.csv"
    cut.write_text("".join(rows[:10]) + rows[10][: len(rows[10]) // 2])  # killed mid-write
    with pytest.raises(ValueError, match="wrong number of cells"):
        ncu_csv.parse_raw_csv(cut)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="not an ncu raw CSV export"):
        ncu_csv.parse_raw_csv(empty)
    with pytest.raises(ValueError, match="empty file; expected the nvtx_sum CSV"):
        nsys_stats.stage_table(empty)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="nsys stats --report nvtx_kern_sum"):
        nsys_stats.kernel_table(other)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_kill_9_then_rerun_incomplete_completes_and_keeps_earlier_results(tmp_path):
    marker = tmp_path / "started"
    tiny = {
        "vocab": 256,
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "d_ff": 48,
        "decode_steps": 2,
        "dtype": "float32",
        "device": "cpu",
        "batch": 1,
        "prompt": 8,
    }
    wf, env = _workflow(
        tmp_path,
        [
            {"name": "a", "callable": "nsightflow.workloads.decoder:build", "args": tiny},
            {"name": "b", "callable": "workloads:slow", "args": {"marker": str(marker), "seconds": 8}},
        ],
    )
    snakemake(wf, "--cores", "1", "results/a/stages.csv", env=env)
    before = {p: _digest(p) for p in (wf / "results" / "a").rglob("*") if p.is_file()}
    proc = foreground_workflow(wf, env)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the slow workload never started"
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and its jobs, mid-run
    proc.wait()
    # Nothing that looks complete was left by the killed job: every output present parses.
    for p in (wf / "results" / "b").rglob("*"):
        if p.is_file() and p.suffix == ".json":
            yaml.safe_load(p.read_text())
    assert not (wf / "results" / "b" / "stages.csv").exists()
    assert left_in_tmp(wf) == []
    locked = snakemake(wf, "--cores", "1", "results/report.html", check=False, env=env)
    assert locked.returncode != 0 and "unlock" in locked.stdout.lower()
    snakemake(wf, "--unlock", env=env)
    snakemake(wf, "--cores", "1", "--rerun-incomplete", "results/report.html", env=env)
    assert (wf / "results" / "report.html").exists() and (wf / "results" / "b" / "stages.csv").exists()
    assert {p: _digest(p) for p in before} == before


def test_nsight_backend_without_a_gpu_fails_at_preflight_with_the_fixes(tmp_path):
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "nsightflow.workloads.decoder:build"}])
    env["PATH"] = "/usr/bin:/bin"  # no nsys, no ncu, no nvidia-smi on this machine anyway
    proc = snakemake(wf, "--cores", "1", "results/report.html", "--config", "profiler=nsight", check=False, env=env)
    assert proc.returncode != 0 and "Error in rule preflight" in proc.stdout
    for fix in (
        "GPU: nvidia-smi lists no GPU. Fix: run on a host with an NVIDIA GPU",
        "nsys: 'nsys' not found. Fix: install Nsight Systems or set `tools: nsys:`",
        "ncu: 'ncu' not found. Fix: install Nsight Compute",
    ):
        assert fix in proc.stdout
    assert not (wf / "results" / "w" / "timeline").exists()  # no capture started
    counters = (wf / "results" / "preflight" / "counters" / "unknown-gpu.log").read_text()
    assert "- counters: 'ncu' not found. Fix: install Nsight Compute" in counters
    assert "FileNotFoundError" not in counters


def test_timeout_stops_the_program_the_tool_launched(tmp_path):
    from nsightflow.capture.launch.tools import ToolError, run_tool

    # A launcher (as ncu or nsys is) whose child hangs: both must be gone after the timeout.
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']);"
        f" open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)"
    )
    with pytest.raises(ToolError, match="did not finish within 2 s"):
        run_tool([sys.executable, "-c", script], tmp_path / "log", timeout_s=2)
    child = int(pidfile.read_text())
    time.sleep(0.5)
    assert not os.path.exists(f"/proc/{child}") or "zombie" in open(f"/proc/{child}/status").read().lower()


def test_a_tools_output_is_in_its_log_while_it_runs(tmp_path):
    """A long ncu launch says nothing for minutes unless its log follows it: each line is in the log as it comes,
    once, under the command line, with the timeout's note after it."""
    import threading

    from nsightflow.capture.launch.tools import ToolError, run_tool

    log = tmp_path / "log"
    script = "import time; print('==PROF== Connected to process 1', flush=True); time.sleep(300)"
    failed: list[BaseException] = []

    def run() -> None:
        try:
            run_tool([sys.executable, "-c", script], log, timeout_s=20)
        except ToolError as exc:
            failed.append(exc)

    tool = threading.Thread(target=run)
    tool.start()
    deadline = time.time() + 15
    while "Connected" not in (log.read_text() if log.exists() else "") and time.time() < deadline:
        time.sleep(0.1)
    assert "Connected to process 1" in log.read_text() and tool.is_alive()  # in the log, the tool still running
    tool.join(60)
    text = log.read_text()
    assert failed and text.count("$ ") == 1 and text.count("\n==PROF== Connected to process 1\n") == 1
    assert text.index("\n==PROF==") < text.index("stopped after the 20 s timeout")


def _pid_written(marker: Path) -> int:
    """The pid a process wrote to ``marker`` once it started (waiting up to 2 minutes), checked alive."""
    deadline = time.time() + 120
    while not (marker.exists() and marker.read_text()) and time.time() < deadline:
        time.sleep(0.2)
    pid = int(marker.read_text())
    assert process_alive(pid)
    return pid


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "kill-9-job", "kill-9-snakemake", "hup-snakemake"])
def test_interrupting_the_workflow_stops_the_workload(tmp_path, how):
    """Ctrl-C or SIGTERM to the workflow's group, SIGKILL to the job's process, or SIGKILL or SIGHUP to Snakemake's
    pid alone (its job, a script under a shell, must notice by itself): the workload dies, nothing is published."""
    marker = tmp_path / "pid"
    wf, env = _workflow(
        tmp_path, [{"name": "w", "callable": "workloads:slow", "args": {"marker": str(marker), "seconds": 30}}]
    )
    proc = foreground_workflow(wf, env)
    try:
        workload = _pid_written(marker)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the foreground group
        elif how == "sigterm":
            os.killpg(proc.pid, signal.SIGTERM)
        elif how == "kill-9-job":  # the job's own process dies: the python running the rule, parent of the workload
            job = int(Path(f"/proc/{workload}/status").read_text().split("PPid:")[1].split()[0])
            os.kill(job, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL if how == "kill-9-snakemake" else signal.SIGHUP)
        deadline = time.time() + 20
        while process_alive(workload) and time.time() < deadline:
            time.sleep(0.2)
        assert not process_alive(workload), f"the workload outlived the job ({how})"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # a failure here must not leave this workflow to the next tests
        proc.wait()
        raise
    proc.wait(timeout=60)  # and Snakemake ends (interrupted, or seeing its job fail)
    run = wf / "results" / "w"
    if how.endswith("-snakemake"):  # past the workload's own end (30 s): nothing may have appeared since
        time.sleep(30)
        assert "the workflow (snakemake, pid" in (run / "logs" / "torch_profile.log").read_text()
    else:
        time.sleep(1)
    assert sorted(p.name for p in run.rglob("*") if p.is_file() and p.parent.name != "logs") == []
    assert left_in_tmp(wf) == []


DAEMON_PROGRAM = """
import subprocess, sys, time
import nvtx
# A daemon: its own session, never waited for; it outlives this program unless something ends it.
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
open(sys.argv[1], "w").write(str(daemon.pid))
with nvtx.annotate("step", domain="T"):
    time.sleep(300)
"""


@pytest.mark.parametrize("how", ["kill-9-job", "kill-9-group"])
def test_a_commands_daemon_dies_with_a_killed_job(tmp_path, how):
    """SIGKILL to the job's process, or to Snakemake's whole process group: the command's own daemon child (its own
    session, orphaned when the program dies) ends too, as every Python process the hook enters watches the job."""
    marker = tmp_path / "daemon.pid"
    (tmp_path / "daemon.py").write_text(DAEMON_PROGRAM)
    wf, env = _workflow(
        tmp_path, [{"name": "d", "command": [sys.executable, str(tmp_path / "daemon.py"), str(marker)]}]
    )
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump({**cfg, "profiler": "torch"}, sort_keys=False))
    proc = foreground_workflow(wf, env)
    try:
        daemon = _pid_written(marker)
        if how == "kill-9-job":
            program = int(Path(f"/proc/{daemon}/status").read_text().split("PPid:")[1].split()[0])
            job = int(Path(f"/proc/{program}/status").read_text().split("PPid:")[1].split()[0])
            os.kill(job, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.time() + 10
        while process_alive(daemon) and time.time() < deadline:
            time.sleep(0.2)
        assert not process_alive(daemon), f"the command's daemon outlived the job ({how})"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert left_in_tmp(wf) == []


def test_a_crash_is_named_and_a_full_disk_does_not_hide_it(tmp_path):
    from nsightflow.capture.launch.tools import ToolError, run_tool

    crash = [sys.executable, "-c", "import os, signal; print('about to crash'); os.kill(os.getpid(), signal.SIGSEGV)"]
    with pytest.raises(ToolError, match="was killed by SIGSEGV") as err:
        run_tool(crash, tmp_path / "log")
    assert "about to crash" in str(err.value)
    # /dev/full refuses every write (ENOSPC), as a full disk does: the tool's own error still comes through.
    fail = [sys.executable, "-c", "import sys; print('nsightflow: stage x raised: the real cause'); sys.exit(2)"]
    with pytest.raises(ToolError, match="exited with 2; the log could not be written") as err:
        run_tool(fail, "/dev/full")
    assert "the real cause" in str(err.value)


def test_harmless_library_errors_are_explained_in_the_log():
    from nsightflow.capture.launch.tools import harmless_notes

    # Printed by torch 2.15's CUDA build under torch.profiler on a machine without a GPU (seen here).
    line = "ERROR:2026-11-22 09:51:28 11620:11620 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35"
    assert "harmless, the CPU trace is complete" in harmless_notes("ok\n" + line + "\n")
    assert harmless_notes("ERROR: something else failed\n") == ""


# Stand-ins for a GPU host's tools (this machine has none): nvidia-smi names an H200; nsys and ncu give versions.
# ncu's counter probe waits (up to 20 s) for nsys's profile to start; nsys's profile starts, then fails. nsys's start
# stamp appears whole (written aside, then moved): the redirect alone makes the file before its time is taken.
HOST_STAND_INS = {
    "nvidia-smi": """#!/bin/sh
case "$*" in *driver_version*) echo "570.86.15";; *name*) echo "NVIDIA H200";; *) echo "stand-in nvidia-smi";; esac
""",
    "nsys": """#!/bin/sh
[ "$1" = "--version" ] && { echo "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0 (stand-in)"; exit 0; }
date +%s.%N > "$STAMPS/.nsys"; mv "$STAMPS/.nsys" "$STAMPS/nsys.start"
sleep 1; date +%s.%N > "$STAMPS/nsys.end"; exit 3
""",
    "ncu": """#!/bin/sh
[ "$1" = "--version" ] && { echo "Version 2025.3.1.0 (stand-in)"; exit 0; }
date +%s.%N > "$STAMPS/ncu.start"
i=0; while [ ! -e "$STAMPS/nsys.start" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
echo '==PROF== Profiling "nsightflow_probe" - 0: 0%....50%....100% - 1 pass'; echo "probe ok"
date +%s.%N > "$STAMPS/ncu.end"
""",
}


def test_the_counter_check_runs_beside_the_timeline_with_one_core(tmp_path):
    """Only ncu's captures need counter access: its check (ncu's start, 2-3 s on the GPU host) runs while the
    timeline runs, under --cores 1, and a failed timeline does not wait for it."""
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "nsightflow.workloads.decoder:build"}])
    tools, stamps = tmp_path / "tools", tmp_path / "stamps"
    tools.mkdir()
    stamps.mkdir()
    for name, text in HOST_STAND_INS.items():
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    env.update(PATH=f"{tools}:{env['PATH']}", STAMPS=str(stamps))
    config = ["--config", "profiler=nsight", "device=NVIDIA H200"]
    proc = snakemake(wf, "--cores", "1", "results/report.html", *config, check=False, env=env)
    assert proc.returncode != 0 and "Error in rule timeline" in proc.stdout, proc.stdout[-3000:]
    t = {p.name: float(p.read_text()) for p in stamps.iterdir()}
    # the probe started before the timeline's profile and ended after it started: the two ran at once
    assert t["ncu.start"] < t["nsys.start"] < t["ncu.end"], t
    from nsightflow.capture.launch.preflight import HostChecks

    host = HostChecks.read(wf / "results" / "preflight" / "NVIDIA-H200.json")
    counters = HostChecks.read(wf / "results" / "preflight" / "counters" / "NVIDIA-H200.json")
    assert [c.name for c in host.checks] == ["GPU", "device", "driver", "nsys", "ncu"]
    assert all(c.ok for c in host.checks)
    assert [(c.name, c.ok) for c in counters.checks] == [("counters", True)]
    assert not (wf / "results" / "w" / "ncu").exists()  # no capture without a timeline


def test_a_fatal_signal_is_told_from_another_end_also_where_torchrun_reports_it():
    from nsightflow.capture.launch.tools import crash_signal

    # torchrun's own lines, from a rank that aborted under torch.profiler in a CPU test run (2026-12-03)
    torchrun = """  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 27318)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 27318"""
    assert crash_signal(1, torchrun) == "SIGABRT"
    assert crash_signal(-signal.SIGSEGV, "") == "SIGSEGV"
    assert crash_signal(-signal.SIGKILL, "") is None  # ended by someone (or the OOM killer), not by its own fault
    assert crash_signal(1, torchrun.replace("-6", "-15")) is None
    assert crash_signal(1, "Traceback ...\nValueError: exitcode : -6") is None  # not torchrun's line
    assert crash_signal(0, "") is None


ABORTS_ONCE = """
import json, os, sys
import nvtx
import torch
mode = json.loads(os.environ["NSIGHTFLOW_HOOK"])["mode"]
marker = sys.argv[1]
for i in range(3):
    with nvtx.annotate("step", domain="T"):
        if mode == "torch" and i == 1 and (sys.argv[2] == "always" or not os.path.exists(marker)):
            open(marker, "a").write("aborted\\n")
            os.abort()
        torch.ones(16, 16) @ torch.ones(16, 16)
"""


@pytest.mark.parametrize("when", ["once", "always"])
def test_a_program_that_dies_under_torch_profiler_runs_once_more(tmp_path, when):
    """A native crash under torch.profiler (kineto corrupts its heap now and then) costs the job one more run of the
    program, said in the log; a program that dies so every time fails the job, naming the signal, after two runs."""
    marker = tmp_path / "aborted"
    (tmp_path / "aborts.py").write_text(ABORTS_ONCE)
    command = [sys.executable, str(tmp_path / "aborts.py"), str(marker), when]
    wf, env = _workflow(tmp_path, [{"name": "a", "command": command}], torch={})
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump({**cfg, "profiler": "torch"}, sort_keys=False))
    proc = snakemake(wf, "--cores", "1", "results/report.html", check=False, env=env)
    log = (wf / "results" / "a" / "logs" / "torch_profile.log").read_text()
    assert marker.read_text().count("aborted") == (1 if when == "once" else 2)
    assert "the program under torch.profiler died of SIGABRT: it runs once more" in log
    if when == "once":
        assert proc.returncode == 0, proc.stdout[-3000:]
        stages = list(csv.DictReader((wf / "results" / "a" / "stages.csv").open()))
        assert [s["stage"] for s in stages] == ["step"]
    else:
        assert proc.returncode != 0 and "was killed by SIGABRT" in proc.stdout
