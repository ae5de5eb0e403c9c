"""A test program: the serving workload (nsightflow.workloads.serving, its arguments after ``--``) in several
processes at once, taking turns at each engine iteration (the step function serving.STEP), in a ring, so that the
arms' iterations run at nearly the same moments: the GPU tier's serving pace test compares the program alone with
the program under nsightflow's timed hook this way.

Why: on the GPU hosts one launch of the serving loop runs 30% to 70% faster or slower than the next one (slow and
fast spells of tens of seconds; a process's pace is a property of the moment, docs/benchmarks.md), so whole launches
of one arm against launches of another compare the machine's moments more than the arms. Iterations that alternate
tens of milliseconds apart share the moment (tests/lockstep.py does the same for the harness's timed pass).

Each participant wraps the step function on its class, over the hook's own wrapper where the hook runs (so the wait
for the turn is outside everything the hook does at a step, and the hook's work inside the wall measured here). At
its first iteration it passes a ready token round the ring (participant 0 sends it; once it is back, every
participant has built its model and engine), then takes the turn before each call and passes it on after. Each
call's wall runs from the turn's start to the call's return. The requests must arrive the same way in every
participant (``--per-step``: the same iterations in every run), so that iteration k of one arm is iteration k of
another. It writes ``--out``: the walls by stage name ``iteration`` and when each turn began (epoch seconds), in
tests/lockstep.py's shape (one pass), and the CPU each call ended on (``cpus``: where a participant's engine thread
runs, for a look at why one process keeps a pace of its own). Participant 0 does not wait for the last token: its
engine's teardown may overlap the others' last iteration (one of a hundred in the GPU test).

:func:`run_ring` starts the ring: any number of participants, each alone or under nsightflow's timed hook.

``python serving_ring.py --index I --of N --pipes DIR --out FILE -- <the serving workload's arguments>``
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lockstep import ring_pipes, run_together, take

from nsightflow.workloads import serving


def on_cpu() -> int:
    """The CPU this thread last ran on (field 39 of its /proc stat), -1 where it cannot be read."""
    try:
        with open("/proc/thread-self/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return -1


def run_ring(
    tmp: Path,
    workload: list[str],
    arms: list[str],
    cwd: str | Path | None = None,
    timeout: float = 600,
    cpus: Iterable[int] | None = None,
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The serving workload (its arguments ``workload``) in one process per arm (``alone``, or ``timed``: under
    nsightflow's timed hook as a command's timed run has it, the step function followed and each step's batch
    summarised), taking turns at each engine iteration in the order listed, each in ``cwd``; ``cpus``: every one of
    them pinned to those CPUs. Each one's output, and each timed one's hook record by its index."""
    from nsightflow.capture.inside.hook_settings import HookSettings
    from nsightflow.capture.launch.command_call import CommandCall

    pipes = ring_pipes(tmp, len(arms))

    def program(i: int) -> list[str]:
        ring = [sys.executable, os.path.abspath(__file__), "--index", str(i), "--of", str(len(arms))]
        return [*ring, "--pipes", str(pipes), "--out", str(tmp / f"{i}.json"), "--", *workload]

    steps = {"step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
    commands: list[tuple[str, list[str], dict[str, str] | None]] = []
    for i, arm in enumerate(arms):
        if arm == "alone":
            commands.append((f"{i} alone", program(i), None))
            continue
        assert arm == "timed", f"an arm is alone or timed, not {arm!r}"
        hook = tmp / f"hook{i}"
        hook.mkdir()
        call = CommandCall(program(i), cwd=cwd, warmup_steps=0, **steps)
        timed = call.launch(HookSettings("timed", str(hook / "timed.json")), hook)
        commands.append((f"{i} timed", timed.argv, {**os.environ, **timed.env}))
    before = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, set(cpus))  # the participants inherit it
    try:
        run_together(tmp, commands, timeout, cwd=cwd)
    finally:
        os.sched_setaffinity(0, before)
    out = [json.loads((tmp / f"{i}.json").read_text()) for i in range(len(arms))]
    records: dict[int, dict[str, Any]] = {}
    for i, arm in enumerate(arms):
        if arm == "timed":
            found = list((tmp / f"hook{i}").glob("timed.*.json"))
            assert len(found) == 1, f"participant {i}'s hook records: {found}"
            records[i] = json.loads(found[0].read_text())
    return out, records


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--of", type=int, required=True)
    p.add_argument("--pipes", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("workload", nargs=argparse.REMAINDER, help="-- then the serving workload's arguments")
    a = p.parse_args()
    rest = a.workload[1:] if a.workload[:1] == ["--"] else a.workload
    # O_RDWR: opening a named pipe so never blocks (Linux), whatever order the participants start in
    mine = os.open(os.path.join(a.pipes, f"{a.index}.in"), os.O_RDWR)
    nxt = os.open(os.path.join(a.pipes, f"{(a.index + 1) % a.of}.in"), os.O_RDWR)
    module, qualname = serving.STEP.split(":")
    owner, name = qualname.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), owner)  # the hook, where it runs, wraps it on this import
    step = cls.__dict__[name]
    walls: list[float] = []
    turns: list[float] = []
    cpus: list[int] = []
    state = {"ready": False, "held": a.index == 0}  # participant 0 holds the token after the ready round

    @functools.wraps(step)
    def in_turn(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not state["ready"]:
            if a.index == 0:
                os.write(nxt, b"r")
            take(mine)
            if a.index != 0:
                os.write(nxt, b"r")
            state["ready"] = True
        if not state["held"]:
            take(mine)
        state["held"] = False
        turns.append(time.time())
        began = time.perf_counter()
        try:
            return step(self, *args, **kwargs)
        finally:
            walls.append(time.perf_counter() - began)
            os.write(nxt, b"t")
            cpus.append(on_cpu())

    setattr(cls, name, in_turn)
    serving.main(rest)
    with open(a.out, "w") as fh:
        json.dump({"index": a.index, "passes": [{"walls": {"iteration": walls}, "turns": turns}], "cpus": cpus}, fh)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
