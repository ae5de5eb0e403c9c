"""A command's timed run and its profile launch side by side (nsightflow.capture.inside.gate), with real processes: the
profile launch's program runs only once the timed run has ended, with the stages it found; the timed run's steps wait
until the other launch is idle; a failed or stopped timed run takes the other launch down with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from nsightflow.capture.inside import gate
from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.launch import children
from nsightflow.capture.launch.command import timed_beside
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.domains import AUTO_DOMAIN
from nsightflow.errors import ToolError, WorkloadError

# Says its hook's mode and the clock at its first and last line; its ranges in domain T (discovered).
PROGRAM = """
import json, os, sys, time
import nvtx
import torch
mode = json.loads(os.environ["NSIGHTFLOW_HOOK"])["mode"]
print(f"{mode} START {time.time()}", flush=True)
print(f"{mode} DEVICES {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
if mode == "timed" and "fail" in sys.argv:
    sys.exit(3)
x = torch.ones(32, 32)
if "noranges" not in sys.argv:
    with nvtx.annotate("prefill", domain="T"):
        x = x @ x
    for _ in range(3):
        with nvtx.annotate("decode", domain="T"):
            x = torch.relu(x @ x)
print(f"{mode} END {time.time()}", flush=True)
"""


def _beside(tmp_path, *flags, env=None, wrap=()):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    call = CommandCall(command=[sys.executable, str(script), *flags], env=env or {})
    work = tmp_path / "work"
    work.mkdir()
    probe = HookSettings("probe", str(work / "probe.json"), None, None, flops_out=str(work / "flops.json"))
    log = tmp_path / "job.log"
    return timed_beside(call, str(work), log, 120, probe, list(wrap)), log


def test_the_profile_launch_runs_its_program_after_the_timed_run_with_the_stages_it_found(tmp_path):
    (found, timed, runs), log = _beside(tmp_path)
    clock = {k: float(v) for k, v in re.findall(r"^(\w+ \w+) ([0-9.]+)$", log.read_text(), re.M)}
    assert clock["timed END"] < clock["probe START"]  # the probe's program waited at the gate for the whole run
    assert found.domain == "T" and found.stages == ["prefill", "decode"]
    assert {k: len(v) for k, v in found.every_wall.items()} == {"prefill": 1, "decode": 3}
    assert {k: len(v) for k, v in runs[0]["steps"].items()} == {k: len(v) for k, v in found.walls.items()}
    assert len(timed) == 1 and timed[0]["mode"] == "timed"
    # peak memory per stage from the probe run, whose steps end synchronized; the timed run does nothing at its steps
    assert set(runs[0]["program_memory"]) == set(found.walls) and "program_memory" not in timed[0]
    assert all(peaks["rss"] > 0 for peaks in runs[0]["program_memory"].values())
    # the hook's install on the ranges' clock, before the first range (benchmarks/launch_layers.py: first steps)
    assert 0 < timed[0]["started_ns"] < min(r[4] for r in timed[0]["ranges"])


@pytest.mark.parametrize(("workload_env", "seen"), [({}, "7"), ({"CUDA_VISIBLE_DEVICES": "3"}, "3")])
def test_both_launches_run_on_the_same_devices(tmp_path, monkeypatch, workload_env, seen):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # the scheduler's choice; the workload's env: wins over it
    _, log = _beside(tmp_path, env=workload_env)
    assert sorted(re.findall(r"^(\w+) DEVICES (\S+)$", log.read_text(), re.M)) == [("probe", seen), ("timed", seen)]


@pytest.mark.parametrize(
    ("flag", "error", "needle"), [("fail", ToolError, "exited with 3"), ("noranges", WorkloadError, "no NVTX")]
)
def test_a_timed_run_that_fails_takes_the_waiting_launch_down_with_it(tmp_path, flag, error, needle):
    started = time.monotonic()
    others = set(children.descendants())  # another test's processes are not this one's to judge
    with pytest.raises(error, match=needle):
        _beside(tmp_path, flag)
    assert time.monotonic() - started < 60  # the gated launch did not wait on (its timeout is 120 s)
    assert set(children.descendants()) - others == set()  # killed, not left waiting at its gate
    assert "probe START" not in (tmp_path / "job.log").read_text()


# A profiler's argv prefix that is slow to start its program, as nsys is (its own start-up before the program's).
SLOW_START = ["sh", "-c", 'sleep 3; exec "$@"', "slow-start"]  # not Python: the hook's sitecustomize stays out of it


def test_the_timed_program_starts_only_once_a_slow_profiled_launch_is_ready(tmp_path):
    """The timed run's program starts after the other launch waits at its gate, not at its first range: a program
    whose own clock starts before its first range (a serving loop's) never counts that wait."""
    (found, _, _), log = _beside(tmp_path, wrap=SLOW_START)
    clock = {k: float(v) for k, v in re.findall(r"^(\w+ \w+) ([0-9.]+)$", log.read_text(), re.M)}
    ready = (tmp_path / "work" / "stages.json.ready").stat().st_mtime
    assert clock["timed START"] >= ready  # its first line ran once the other launch was ready
    assert clock["timed END"] < clock["probe START"] and found.stages == ["prefill", "decode"]


# Under nsys both launches start the program at once and stop at its first contact with what they share (gate_at
# contact): the program below makes one (argv[1]) after its imports, or none before its first range.
CONTACT = """
import json, os, socket, subprocess, sys, time
import nvtx
import torch
mode = json.loads(os.environ["NSIGHTFLOW_HOOK"])["mode"]
print(f"{mode} START {time.time()}", flush=True)
time.sleep(1.0)  # its imports, say: both launches' at the same time
contact = sys.argv[1]
if contact == "cuda":
    try:
        torch.cuda.init()  # torch's CUDA initialisation (on a CPU build it raises, once it has run)
    except (AssertionError, RuntimeError) as exc:
        print(f"{mode} NO CUDA {exc}", flush=True)
elif contact == "program":
    subprocess.run(["true"], check=True)
elif contact == "socket":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
elif contact == "python":  # not contacts: a Python child (it stops at its own) and the standard library's query
    import ctypes.util
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    ctypes.util.find_library("m")
    print(f"{mode} CHILDREN {time.time()}", flush=True)
if contact not in ("range", "python"):
    print(f"{mode} CONTACT {time.time()}", flush=True)
x = torch.ones(32, 32)
with nvtx.annotate("prefill", domain="T"):
    if contact in ("range", "python"):
        print(f"{mode} CONTACT {time.time()}", flush=True)
    x = x @ x
for _ in range(3):
    with nvtx.annotate("decode", domain="T"):
        x = torch.relu(x @ x)
print(f"{mode} END {time.time()}", flush=True)
"""


CONTACTS = {
    "cuda": "torch's CUDA initialisation",
    "program": "a child process",
    "socket": "a socket bound",
    "range": "a range",
    "python": "a range",
}


@pytest.mark.parametrize("contact", list(CONTACTS))
def test_at_a_late_gate_both_launches_import_at_once_and_stop_at_the_first_contact(tmp_path, contact):
    """gate_at contact: the profiled launch's program starts while the timed run runs (its imports overlap), but its
    first CUDA initialisation, other program started, bound socket or range comes after the timed run's end, with the
    stages that run found; the timed program's own contact waits until the other launch is ready. A Python child and
    ctypes' library query are not contacts."""
    script = tmp_path / "program.py"
    script.write_text(CONTACT)
    call = CommandCall(command=[sys.executable, str(script), contact])
    work = tmp_path / "work"
    work.mkdir()
    probe = HookSettings("probe", str(work / "probe.json"), None, None, gate_at="contact")
    log = tmp_path / "job.log"
    found, timed, runs = timed_beside(call, str(work), log, 120, probe, SLOW_START)
    clock = {k: float(v) for k, v in re.findall(r"^(\w+ \w+) ([0-9.]+)$", log.read_text(), re.M)}
    ready = (work / "stages.json.ready").stat().st_mtime
    assert clock["probe START"] < clock["timed END"]  # the two started the program at once
    assert clock["timed CONTACT"] >= ready  # the timed run's contact waited until the other launch was ready
    assert clock["probe CONTACT"] > clock["timed END"]  # the other launch's, until the timed run had ended
    assert found.domain == "T" and found.stages == ["prefill", "decode"]
    assert {k: len(v) for k, v in found.every_wall.items()} == {"prefill": 1, "decode": 3}
    assert {k: len(v) for k, v in runs[0]["steps"].items()} == {k: len(v) for k, v in found.walls.items()}
    assert "this launch waited" in log.read_text() and f"at its first contact ({CONTACTS[contact]})" in log.read_text()
    if contact == "cuda":
        assert "probe NO CUDA" in log.read_text()  # torch's own initialisation ran after the wait
    if contact == "python":
        assert clock["probe CHILDREN"] < clock["timed END"]  # they ran while the timed run waited for this launch


def test_a_late_gate_follows_the_automatic_stages_of_a_program_without_ranges(tmp_path):
    """A program that opens no range of its own (tests/programs/no_ranges.py, generating): the profiled launch follows
    its automatic stages (its model's top-level calls), installed before the gate says they are the stages."""
    program = Path(__file__).parent / "programs" / "no_ranges.py"
    sizes = ["--steps", "4", "--hidden", "64", "--batch", "8", "--prompt", "16", "--mode", "generate"]
    call = CommandCall(command=[sys.executable, str(program), *sizes])
    work = tmp_path / "work"
    work.mkdir()
    probe = HookSettings("probe", str(work / "probe.json"), None, None, gate_at="contact")
    found, _, runs = timed_beside(call, str(work), tmp_path / "job.log", 120, probe, [])
    assert found.domain == AUTO_DOMAIN and found.stages == ["inference 1x16x64", "inference 1x1x64"]
    assert {k: len(v) for k, v in runs[0]["steps"].items()} == {k: len(v) for k, v in found.walls.items()}
    assert len(found.every_wall["inference 1x1x64"]) == 4


def test_the_timed_run_waits_until_the_other_launch_is_ready_or_has_ended(tmp_path):
    gated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    t0 = time.monotonic()
    gate.wait_ready(tmp_path / "never.json", gated.pid)  # never ready: it waits until the launch has ended
    assert time.monotonic() - t0 > 0.3
    gated.wait()
    ready = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        t0 = time.monotonic()  # alive and never ready: it gives up after its timeout (a lock held between the two)
        assert gate.wait_ready(tmp_path / "gate.json", ready.pid, timeout_s=0.5) is False
        assert 0.4 < time.monotonic() - t0 < 5
        gate.ready_path(tmp_path / "gate.json").write_text("")
        t0 = time.monotonic()
        assert gate.wait_ready(tmp_path / "gate.json", ready.pid) is True
        assert time.monotonic() - t0 < 5
    finally:
        ready.kill()
        ready.wait()


# A program that sleeps inside its first range; the job that runs it beside its gated launch, to be stopped.
SLEEPER = """
import json, os, sys, time
import nvtx
import torch
mode = json.loads(os.environ["NSIGHTFLOW_HOOK"])["mode"]
with nvtx.annotate("prefill", domain="T"):
    open(sys.argv[1] + "." + mode, "w").close()
    time.sleep(120)
"""

DRIVER = """
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it is, should it not end (the test asks)
from nsightflow.capture.launch.command import timed_beside
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.inside.hook_settings import HookSettings
script, work = sys.argv[1], sys.argv[2]
call = CommandCall(command=[sys.executable, script, work + "/started"])
probe = HookSettings("probe", work + "/probe.json", None, None)
try:
    timed_beside(call, work, work + "/job.log", 300, probe, [])
except BaseException as exc:  # what is left below the job before it exits (its children would die with it)
    from nsightflow.capture.launch.children import descendants
    print("left", descendants(), type(exc).__name__, flush=True)
"""


def _running(needle, but=()):
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int(p.name) not in but and needle in (p / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


SLOW_STOP_S = 15  # a job slower to start or to stop says where its threads were then (a warning); passes up to 60 s


def test_stopping_the_job_while_its_timed_run_runs_kills_both_launches(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-c", DRIVER, str(script), str(work)]
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    began = time.monotonic()
    deadline, dumped = began + 60, False
    while not ((work / "started.timed").exists() and (work / "stages.json.ready").exists()):
        assert time.monotonic() < deadline and driver.poll() is None
        if not dumped and time.monotonic() - began > SLOW_STOP_S:  # a slow start: where the job's threads are
            driver.send_signal(signal.SIGUSR1)
            dumped = True
        time.sleep(0.1)
    start_s = time.monotonic() - began
    assert len(_running(str(script), [driver.pid])) == 2  # the timed run in its range, the other launch at its gate
    driver.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    try:
        out, err = driver.communicate(timeout=SLOW_STOP_S)
    except subprocess.TimeoutExpired:  # slow (once in a fresh clone's run, 30 s): where its threads are now
        driver.send_signal(signal.SIGUSR1)
        try:
            out, err = driver.communicate(timeout=60 - SLOW_STOP_S)
        except subprocess.TimeoutExpired:  # say where the job is stuck (its threads' stacks), then fail
            driver.send_signal(signal.SIGUSR1)
            time.sleep(2)
            driver.kill()
            out, err = driver.communicate()
            log = (work / "job.log").read_text(errors="replace") if (work / "job.log").exists() else ""
            pytest.fail(f"the job had not ended 60 s after SIGTERM; printed {out!r}; its threads:\n{err}\nlog:\n{log}")
        took = time.monotonic() - stopped
        said = f"the job took {took:.1f} s to end after SIGTERM; its threads at {SLOW_STOP_S} s:\n{err}"
        warnings.warn(said, stacklevel=1)
    if start_s > SLOW_STOP_S:
        warnings.warn(f"the job took {start_s:.1f} s to start both launches; its threads then:\n{err}", stacklevel=1)
    assert out.strip() == "left [] Stopped"  # both launches killed by the job itself
    deadline = time.monotonic() + 10
    while _running(str(script)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(str(script)) == []
    assert not (work / "started.probe").exists()


@pytest.mark.parametrize(
    ("args", "executable", "contact"),
    [
        (["/sbin/ldconfig", "-p"], None, False),  # ctypes.util.find_library's query
        ("ldconfig -p 2>/dev/null", None, False),  # the same as a shell's command line
        ([sys.executable, "-c", "pass"], None, False),  # Python: the hook stops it at its own contact
        ("python3 train.py", None, False),
        (["ignored"], sys.executable, False),
        (["true"], None, True),  # another program: it could use the GPU or a port
        ("nvcc --version", None, True),
        (b"redis-server --port 6379", None, True),
        ("", None, True),
    ],
)
def test_which_child_processes_are_a_contact(args, executable, contact):
    assert gate._foreign_child(None, args, executable) is contact


# torchrun's launcher under Contacts: the first contact it makes, then the process ends there.
TORCHRUN = """
import os, sys
from nsightflow.capture.inside.gate import Contacts

def stop(contact):
    print("CONTACT", contact, flush=True)
    os._exit(0)

Contacts(stop).install()
sys.argv = ["torchrun", "--nproc_per_node", "2", "--master_port", sys.argv[1], "-m", "json.tool", "/dev/null"]
if os.environ.get("AS_MODULE"):
    import runpy
    runpy.run_module("torch.distributed.run", run_name="__main__")
else:
    from torch.distributed.run import main
    main()
print("NO CONTACT", flush=True)
"""


@pytest.mark.parametrize("as_module", [False, True])
def test_torchruns_first_contact_is_its_launch_before_its_rendezvous(as_module, tmp_path):
    """torchrun (and ``python -m torch.distributed.run``) binds its rendezvous port in C++, before it starts the
    ranks: its contact is its launch, which comes before both (no rank started, no port bound)."""
    import socket

    with socket.socket() as s:  # a free port: a clash with another test would show as a bind error, not a contact
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    # torchrun makes its log folder (torchelastic_*) before its launch, and the launch stopped there removes nothing
    env = {**os.environ, "TMPDIR": str(tmp_path), **({"AS_MODULE": "1"} if as_module else {})}
    out = subprocess.run([sys.executable, "-c", TORCHRUN, port], capture_output=True, text=True, env=env, timeout=120)
    assert "CONTACT torchrun's launch" in out.stdout, out.stdout + out.stderr
    assert "NO CONTACT" not in out.stdout
