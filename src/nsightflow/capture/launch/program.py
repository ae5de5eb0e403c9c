"""One program interface: a workload as the profiling rules run it, a Python callable (the harness runs it) or a
command (the hook follows it inside its own processes). The rules build it once from their ``harness`` params
(:func:`program`) and ask it for its timeline, its torch.profiler trace and the launches ncu runs; each kind keeps
its own way of running, behind the same three calls."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from nsightflow.capture.inside.harness import HarnessCall, Launch
from nsightflow.capture.launch import command, tools
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.records import Manifest


class Program(Protocol):
    """A workload the rules profile: timed, under nsys, under torch.profiler, and under ncu with a plan."""

    def timeline(self, nsys_bin: str, rep: Path, sqlite: Path, out: ProfileOutputs, run: RunSettings) -> None:
        """nsys's timeline (``rep`` and its SQLite export), the wall times, the analytic count, the ceilings and
        the run's manifest."""

    def torch_profile(self, trace: Path, out: ProfileOutputs, run: RunSettings) -> None:
        """torch.profiler's Chrome trace, the analytic count, the ceilings and the run's manifest."""

    def ncu_launches(self, plan_json: Path, manifest: Manifest, await_plan: bool) -> list[Launch]:
        """What ncu runs for the plan ``plan_json``, in the order to try (the next one where a capture differs from
        the plan)."""

    def ncu_launches_beside(self, plan_json: Path, gate: Path) -> list[Launch]:
        """What ncu runs where it starts with the timeline's launches, waiting at its first contact until the job
        opens ``gate`` (nsightflow.capture.launch.together); none where this kind of program cannot wait so."""


@dataclass(frozen=True)
class CallableProgram:
    """A Python callable, run by the harness (nsightflow.capture.inside.harness) in the profilers' own launch."""

    call: HarnessCall

    def timeline(self, nsys_bin: str, rep: Path, sqlite: Path, out: ProfileOutputs, run: RunSettings) -> None:
        assert not run.also_gated, "a callable's ncu launch never starts with its timeline"
        tools.timeline(nsys_bin, self.call, rep, sqlite, out, run)

    def torch_profile(self, trace: Path, out: ProfileOutputs, run: RunSettings) -> None:
        tools.torch_profile(self.call, trace, out, run)

    def ncu_launches(self, plan_json: Path, manifest: Manifest, await_plan: bool) -> list[Launch]:
        """A callable whose first pass did no one-time work that launches kernels (the timeline's harness looked:
        nsightflow.capture.inside.passes.first_pass_work) first without its warm-up pass, the windows in the
        program's first pass (under ncu a pass of an 8B-shaped decoder costs about 4 s more than alone); then,
        should that capture differ from the plan, after its warm-up passes. ``await_plan``: the launches may start
        before the plan is made (they wait for it: ``Launch.awaits_plan``)."""
        warmed = self.call.windowed(plan_json, await_plan)
        if self.call.warmup > 0 and manifest.first_pass_work == []:
            return [replace(self.call, warmup=0).windowed(plan_json, await_plan), warmed]
        return [warmed]

    def ncu_launches_beside(self, plan_json: Path, gate: Path) -> list[Launch]:
        """None here: the harness builds the model (on the GPU) before anything could hold it, and which launches to try
        depends on the timeline's manifest (its first pass's one-time work); its ncu launch starts after the
        timeline, in a job of its own."""
        return []


@dataclass(frozen=True)
class CommandProgram:
    """A command, followed inside its own processes by the hook (nsightflow.capture.inside.hook)."""

    call: CommandCall

    def timeline(self, nsys_bin: str, rep: Path, sqlite: Path, out: ProfileOutputs, run: RunSettings) -> None:
        command.timeline(nsys_bin, self.call, rep, sqlite, out, run)

    def torch_profile(self, trace: Path, out: ProfileOutputs, run: RunSettings) -> None:
        command.torch_profile(self.call, trace, out, run)

    def ncu_launches(self, plan_json: Path, manifest: Manifest, await_plan: bool) -> list[Launch]:
        """The command with the hook opening the plan's windows. ``await_plan``: the launch may start before the plan
        is made; the hook waits for it at the program's first step (its start-up hides the plan's making)."""
        return [self.call.windowed(plan_json, manifest, await_plan)]

    def ncu_launches_beside(self, plan_json: Path, gate: Path) -> list[Launch]:
        """The command with the hook holding it at its first contact until ``gate`` opens with the stages, then
        opening the plan's windows (awaited at the first step)."""
        return [self.call.windowed_beside(plan_json, gate)]


def program(fields: dict[str, Any]) -> Program:
    """The program a rule's ``harness`` params describe (common.smk ``harness_call``): a command or a callable."""
    if "command" in fields:
        return CommandProgram(CommandCall(**fields))
    return CallableProgram(HarnessCall(**fields))


def ncu_launches(fields: dict[str, Any], plan_json: str | Path, manifest: str | Path, await_plan: bool) -> list[Launch]:
    """Rule ncu_capture's launches for the plan ``plan_json`` (see :meth:`Program.ncu_launches`)."""
    return program(fields).ncu_launches(Path(plan_json), Manifest.read(manifest), await_plan)
