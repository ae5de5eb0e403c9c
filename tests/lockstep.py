"""A test program: several processes of one workload take turns, step by step, running the harness's timed pass, in
a ring, so that each arm's steps run at nearly the same moments as the others'.

Why: on the GPU hosts a process's pace changes by up to 2x within seconds (a pure-Python loop timed in a process ran
in about 18 or about 34 ms, and did not predict the same process's decode step a few seconds later:
benchmarks/pace_covariate.py), so launches of one arm against launches of another compare the machine's moments more
than the arms; whole passes taking turns (about 1.5 s a round of four) still did, on a slower machine. Steps that
alternate milliseconds apart share the moment; each arm's step is compared with the reference arm's steps just
before and after it.

Each participant builds the workload, warms it up (nsightflow.capture.inside.passes.warm_up), opens the profiler's
capture range if told to (a traced arm), waits until every participant is ready, then runs ``--rounds`` timed passes
(nsightflow.capture.inside.passes.timed_pass, the harness's ``--timed`` pass), its setup and each step one turn (outside
the step's timing), taken when the token from the one before it in the ring arrives and passed on after.
Participant 0 takes the first turn. The token travels through named pipes in ``--pipes``: ``i`` reads ``<i>.in`` and
writes ``<i+1 mod n>.in``. It writes ``--out``: each pass's step walls by stage and when each of its turns began
(epoch seconds). ``--cpu``: every participant runs its passes on that CPU (they take turns, so none waits for
another's), so that they share its moments too.

``python lockstep.py --index I --of N --pipes DIR --rounds R --out FILE [--traced] [--cpu C] --args JSON``
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nsightflow.capture.inside.passes import capture_range, timed_pass, warm_up
from nsightflow.workloads.api import build_workload

WAIT_S = 300  # a participant that waits longer for the token than this stops (another one died)


def take(fd: int) -> None:
    """Wait for one token byte on ``fd``."""
    ready, _, _ = select.select([fd], [], [], WAIT_S)
    if not ready or not os.read(fd, 1):
        raise SystemExit(f"lockstep: no token in {WAIT_S} s: another participant stopped")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--of", type=int, required=True)
    p.add_argument("--pipes", required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--traced", action="store_true")
    p.add_argument("--cpu", type=int)
    p.add_argument("--callable", default="nsightflow.workloads.decoder:build")
    p.add_argument("--args", default="{}")
    a = p.parse_args()
    # O_RDWR: opening a named pipe so never blocks (Linux), whatever order the participants start in
    mine = os.open(os.path.join(a.pipes, f"{a.index}.in"), os.O_RDWR)
    nxt = os.open(os.path.join(a.pipes, f"{(a.index + 1) % a.of}.in"), os.O_RDWR)
    workload = build_workload(a.callable, json.loads(a.args))
    warm_up(workload, 1)
    if a.traced:
        capture_range(True)
    # ready: participant 0 sends a token round the ring; it comes back once every participant has passed it on
    if a.index == 0:
        os.write(nxt, b"r")
    take(mine)
    if a.index != 0:
        os.write(nxt, b"r")
    if a.cpu is not None:  # after the build and warm-up, which would otherwise queue on one CPU
        os.sched_setaffinity(0, {a.cpu})
    held = a.index == 0  # participant 0 holds the token after the ready round
    turns: list[float] = []

    @contextmanager
    def turn() -> Iterator[None]:
        nonlocal held
        if not held:
            take(mine)
        held = False
        turns.append(time.time())
        yield
        os.write(nxt, b"t")

    passes = []
    for _ in range(a.rounds):
        walls = timed_pass(workload, turn)
        passes.append({"walls": walls, "turns": turns[:]})
        turns.clear()
    if a.index == 0:
        take(mine)  # the last turn's token, so no participant outlives the ring's last step unwaited
    with open(a.out, "w") as fh:
        json.dump({"index": a.index, "traced": a.traced, "passes": passes}, fh)
    sys.stdout.flush()


@dataclass(frozen=True)
class Arm:
    """One participant: ``wrap(program, i)`` is its command line around the program's (e.g. under nsys), and
    whether it opens the capture range before its passes."""

    name: str
    wrap: Callable[[list[str], int], list[str]]
    traced: bool = False


def ring_pipes(tmp: Path, n: int) -> Path:
    """The named pipes of a ring of ``n`` participants (``i`` reads ``<i>.in``), in ``tmp/pipes``."""
    pipes = tmp / "pipes"
    pipes.mkdir()
    for i in range(n):
        os.mkfifo(pipes / f"{i}.in")
    return pipes


def run_together(
    tmp: Path,
    commands: list[tuple[str, list[str], dict[str, str] | None]],
    timeout: float,
    cwd: str | Path | None = None,
) -> None:
    """Run every (name, argv, environment or None: this one's) at once in ``cwd``, each one's output in
    ``tmp/<i>.log``, until all have ended. All of them are stopped if one fails or they outlast ``timeout`` s."""
    procs = []
    try:
        for i, (_, argv, env) in enumerate(commands):
            with open(tmp / f"{i}.log", "w") as log:  # the child keeps its own copy of the descriptor
                procs.append(
                    subprocess.Popen(
                        argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=cwd
                    )
                )
        deadline = time.monotonic() + timeout
        while True:
            codes = [proc.poll() for proc in procs]
            failed = [i for i, rc in enumerate(codes) if rc not in (None, 0)]
            if failed:
                i = failed[0]
                tail = (tmp / f"{i}.log").read_text()[-2000:]
                raise RuntimeError(f"participant {i} ({commands[i][0]}) exited {codes[i]}: {tail}")
            if all(rc == 0 for rc in codes):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ring of {len(commands)} participants outlasted {timeout} s")
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_ring(tmp: Path, arms: list[Arm], rounds: int, args: dict, cpu: int | None, timeout: float) -> list[dict]:
    """Run one participant per arm, ring order as listed (the first is the reference), and return each one's
    output. All of them are stopped if one fails or the ring outlasts ``timeout`` seconds."""
    pipes = ring_pipes(tmp, len(arms))
    commands: list[tuple[str, list[str], dict[str, str] | None]] = []
    for i, arm in enumerate(arms):
        program = [sys.executable, __file__, "--index", str(i), "--of", str(len(arms)), "--pipes", str(pipes)]
        program += ["--rounds", str(rounds), "--out", str(tmp / f"{i}.json"), "--args", json.dumps(args)]
        program += (["--traced"] if arm.traced else []) + ([] if cpu is None else ["--cpu", str(cpu)])
        commands.append((arm.name, arm.wrap(program, i), None))
    run_together(tmp, commands, timeout)
    return [json.loads((tmp / f"{i}.json").read_text()) for i in range(len(arms))]


def paired_ratios(ref: dict, arm: dict, stage: str) -> list[float]:
    """Each of ``arm``'s steps of ``stage`` over the reference's same step and its next one (their mean; the same
    step alone for a pass's last): the reference's turns just before and after it."""
    out = []
    for mine, theirs in zip(arm["passes"], ref["passes"], strict=True):
        r = theirs["walls"][stage]
        for k, wall in enumerate(mine["walls"][stage]):
            out.append(wall / statistics.fmean(r[k : k + 2]))
    return out


if __name__ == "__main__":
    main()
