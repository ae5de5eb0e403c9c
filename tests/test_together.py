"""ncu's launch of a command started with the timeline's (config ncu.start with_timeline:
nsightflow.capture.launch.together), with real processes and no profiler (neither runs on a CPU; the GPU tier's serving
test runs the job whole under nsys and ncu): the launch imports beside the timeline's, holds at its first contact until
the programs have ended (let go while the profiler around the last one still exports: a wrapper stands in for nsys),
takes the stages from its gate and opens the plan's window in the step the plan names; the timed run's program starts
only once that launch is ready too."""

from __future__ import annotations

import os
import re
import sys
import time

from nsightflow.capture.inside.gate import ready_path
from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.launch.command import timed_beside
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.launch.ncu_capture import _Planner
from nsightflow.capture.launch.ncu_inputs import Counters
from nsightflow.capture.launch.release import Release
from nsightflow.capture.launch.tools import run_tool

# Its imports (a second), then a bound socket (a contact), then its ranges in domain T; under ncu's mode the profiler
# switch prints instead of reaching a GPU.
PROGRAM = """
import json, os, socket, sys, time
import nvtx
import torch
import torch.cuda.profiler as switch
mode = json.loads(os.environ["NSIGHTFLOW_HOOK"])["mode"]
switch.start = lambda: print(f"{mode} WINDOW START", flush=True)
switch.stop = lambda: print(f"{mode} WINDOW STOP", flush=True)
print(f"{mode} START {time.time()}", flush=True)
time.sleep(1.0)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
print(f"{mode} CONTACT {time.time()}", flush=True)
x = torch.ones(32, 32)
with nvtx.annotate("prefill", domain="T"):
    x = x @ x
for i in range(3):
    with nvtx.annotate("decode", domain="T"):
        print(f"{mode} STEP decode {i}", flush=True)
        x = torch.relu(x @ x)
print(f"{mode} END {time.time()}", flush=True)
"""


# What stands in for nsys around the profiled program: the program, then `seconds` of the profiler's own end (nsys's
# collection, import and SQLite export: 7 to 10 s of the serving loop's timeline on the GPU host; 3 s in these tests
# unless one says otherwise), the GPU unused.
def nsys_end(seconds: float) -> list[str]:
    return ["sh", "-c", f'"$@"; rc=$?; sleep {seconds}; exit $rc', "sh"]


def _plan(path):
    from nsightflow.capture.read.plan import CapturePlan, StagePlan, Window

    window = Window("decode", 1, None, "the step whole")
    decode = StagePlan(steps=3, sampled_steps=[1], extra_steps=[], structures=1, launches=1, comm_launches=0)
    plan = CapturePlan("representatives", "T", [window], [], {"decode": decode})
    plan.write(path)
    return plan


def _together(tmp_path, command: list[str], end_s: float = 3):
    """ncu's launch of ``command`` (no ncu: the hook's switch prints) started first, the timeline's timed and profiled
    runs beside it as nsightflow.capture.launch.command.timeline runs them for together (nsys_end(end_s) for nsys): the
    launch's output, the timeline's log and output, what the timed run found and its records, when the timeline
    ended (epoch s), and the gate."""
    call = CommandCall(command=command)
    work = tmp_path / "work"
    work.mkdir()
    plan_json, gate = work / "plan.json", (work / "ncu.json").resolve()
    launch = call.windowed_beside(plan_json, gate)
    assert launch.awaits_plan
    log, timed, ended = tmp_path / "timeline.log", [], []

    def timeline_first(env, pid):
        probe = HookSettings("probe", str(work / "probe.json"), None, None, gate_at="contact")
        release = Release({str(gate): pid}, log)
        try:
            timed.append(timed_beside(call, str(work), log, 120, probe, nsys_end(end_s), {str(gate): pid}, release))
        finally:
            release.stop()
        ended.append(time.time())
        release.at_end(time.monotonic())

    bf16 = Counters(["bf16"], False, ["bf16"])
    planner = _Planner(lambda p: (_plan(p), bf16), plan_json, None, lambda c, comm: launch.argv, launch.argv, bf16,
                       first=timeline_first)  # fmt: skip
    out, rc = run_tool(launch.argv, tmp_path / "ncu.log", 120, check=False, env=launch.env, beside=planner)
    assert rc == 0, out
    assert os.path.exists(plan_json)
    said = log.read_text() + out
    let_go = re.search(r"the launches started with the timeline were let go ([0-9.]+) s before its end", said)
    assert let_go and float(let_go.group(1)) > end_s / 2, said  # let go while its profiler still exported
    found, records, _ = timed[0]
    return out, said, found, records, ended[0], gate


def test_ncus_launch_holds_at_its_first_contact_until_the_timeline_has_ended_then_takes_its_stages(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    out, said, found, _, ended, gate = _together(tmp_path, [sys.executable, str(script)])
    clock = {k: float(v) for k, v in re.findall(r"^(\w+ \w+) ([0-9.]+)$", said, re.M)}
    assert clock["ncu START"] < clock["timed END"]  # its imports beside the timed run's program
    assert clock["timed CONTACT"] >= ready_path(gate).stat().st_mtime  # which waited until this launch was ready
    # held until the timeline's programs had ended, let go while its profiler still ran (its export)
    assert max(clock["timed END"], clock["probe END"]) < clock["ncu CONTACT"] < ended - 1.5
    assert found.domain == "T" and found.stages == ["prefill", "decode"]
    assert "this launch waited" in out and "at its first contact (a socket bound)" in out
    # the gate's stages: the window opened around the step the plan names, and the launch ended after it
    lines = [ln.strip() for ln in out.splitlines() if ln.startswith("ncu ")]
    assert lines[-4:] == ["ncu STEP decode 0", "ncu WINDOW START", "ncu STEP decode 1", "ncu WINDOW STOP"], lines
    assert "ncu's launch of the program stops here" in out and "ncu END" not in out


RANKS_PROGRAM = """
import json, os, time
mode = json.loads(os.environ["NSIGHTFLOW_HOOK"])["mode"]
me = mode + os.environ["RANK"]
print(f"{me} START {time.time()}", flush=True)
import nvtx
import torch
import torch.cuda.profiler as switch
switch.start = lambda: print(f"{me} WINDOW START", flush=True)
switch.stop = lambda: print(f"{me} WINDOW STOP", flush=True)
x = torch.ones(32, 32)
for i in range(3):
    with nvtx.annotate("decode", domain="T"):
        print(f"{me} STEP decode {i}", flush=True)
        x = torch.relu(x @ x)
print(f"{me} END {time.time()}", flush=True)
"""


def test_ncus_torchrun_launch_goes_on_once_every_process_of_the_timeline_has_ended(tmp_path):
    """The same with a torchrun command of two ranks: ncu's launcher holds at torchrun's launch (its ranks not
    started) until the three processes of the program under the timeline's profiler (the launcher and its two
    ranks) have written their records, then its ranks run while that profiler still exports (8 s of it here: the
    ranks print their start before their imports, and torchrun's rendezvous and spawn take a second or two)."""
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_PROGRAM)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    out, said, _, records, ended, _ = _together(tmp_path, [*torchrun, str(script)], end_s=8)
    clock = {k: float(v) for k, v in re.findall(r"^(\w+ \w+) ([0-9.]+)$", said, re.M)}
    assert len(records) == 3  # the launcher's record and each rank's
    # held until the timeline's programs had ended, let go while its profiler still exported; its ranks, started
    # after that (a sweep of what the profiler's run left behind must spare them), ran to their end
    assert max(clock["probe0 END"], clock["probe1 END"]) < min(clock["ncu0 START"], clock["ncu1 START"])
    assert max(clock["ncu0 START"], clock["ncu1 START"]) < ended  # by the ranks' own clock, not the release's log
    assert "at its first contact (torchrun's launch)" in out
    assert "ncu0 END" in clock and "ncu1 END" in clock and "ncu0 WINDOW START" in out
