"""A command workload as the config gives it (:class:`CommandCall`) and how each profiling launch runs it: the command
with the hook (nsightflow.capture.inside.hook) in its environment, and under ncu with the plan's windows, after its
timeline or started with it (:meth:`CommandCall.windowed_beside`: nsightflow.capture.launch.together). The runs
themselves (timed, under nsys, under torch.profiler) are nsightflow.capture.launch.command's."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nsightflow.capture.inside.harness import Launch
from nsightflow.capture.inside.hook_settings import HOOK_ENV, JOB_ENV, HookSettings
from nsightflow.capture.launch.children import identity
from nsightflow.capture.launch.hook_site import program_tmp, site_dir
from nsightflow.capture.read.comm import REPLAY_SAFE_ENV
from nsightflow.capture.read.warmup import Window
from nsightflow.domains import DEFAULT_DOMAIN
from nsightflow.errors import ConfigError
from nsightflow.records import Manifest

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill(argv: list[str], args: dict[str, Any]) -> list[str]:
    """The command's argv with each ``{name}`` replaced by the run's value of ``name`` (its args and sweep point)."""

    def value(m: re.Match[str]) -> str:
        if m.group(1) not in args:
            raise ConfigError(
                f"command argument {m.string!r}: placeholder {{{m.group(1)}}} has no value; give it under the "
                f"workload's args: or sweep: (known: {sorted(args) or 'none'})"
            )
        return str(args[m.group(1)])

    return [PLACEHOLDER.sub(value, a) for a in argv]


@dataclass(frozen=True)
class CommandCall:
    """One command workload as the config gives it (fields of ``command_call`` in common.smk)."""

    command: list[str]
    args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    cwd: str | None = None
    domain: str | None = None  # the program's NVTX domain of its stages; None: discovered
    stages: list[str] | None = None  # its stage range names; None: the domain's top-level ranges
    mirror: str = DEFAULT_DOMAIN  # nsightflow's own domain (config nvtx_domain)
    dtype: str | None = None
    rank: int = 0  # a job of several processes: the rank that is probed and captured
    gpus: int = 1  # the devices its processes use (one per rank for NCCL): claimed together
    warmup_steps: int | str = "auto"  # "auto" (nsightflow.capture.read.warmup), or the first N steps of each stage
    # stage name -> 'module:qualname' whose calls are its steps (nsightflow.capture.inside.hook_steps); then domain
    # is nsightflow's automatic one and stages are these names
    step_functions: dict[str, str] = field(default_factory=dict)
    # stage name -> 'module:qualname' summarising each step's inputs (a step function's stages only)
    step_inputs: dict[str, str] = field(default_factory=dict)
    # the steps profiled, {"start": K, "steps": N} of each stage (nsightflow.capture.read.warmup.Window); None: all
    window: dict[str, int] | None = None

    def argv(self) -> list[str]:
        return fill(self.command, self.args)

    def steps_window(self) -> Window | None:
        return Window(**self.window) if self.window else None

    def launch(self, settings: HookSettings, private: str | Path) -> Launch:
        """The command with the hook: its site folder (made in ``private``, a folder of this run only) first on
        ``PYTHONPATH``, the settings in the environment."""
        env = {k: str(v) for k, v in self.env.items()}
        path = [str(site_dir(private)), env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        env[HOOK_ENV] = replace(settings, step_functions=self.step_functions, step_inputs=self.step_inputs).to_env()
        env[JOB_ENV] = identity()  # every Python process of the program ends when this job does, however it ends
        for key, value in program_tmp(private).items():
            env.setdefault(key, value)  # the workload's own env: wins
        cwd = str(Path(self.cwd).resolve()) if self.cwd else None  # every path a tool is given is absolute
        return Launch(self.argv(), env, cwd, self.gpus)

    def windowed(self, plan_json: str | Path, manifest: Manifest, await_plan: bool = False) -> Launch:
        """The launch ncu runs: the hook opens the plan's windows in the stages the timeline found, never in their
        warm-up steps (its site folder beside the plan, in the run's own results). ``await_plan``: the plan is made
        while the program starts; the hook waits for it at the first step."""
        windows = str(Path(plan_json).resolve())
        settings = HookSettings(
            "ncu", None, mirror=self.mirror, windows=windows, await_windows=await_plan, rank=self.rank
        )
        return self._under_ncu(replace(settings, **ncu_stages(manifest)), plan_json)

    def windowed_beside(self, plan_json: str | Path, gate: str | Path) -> Launch:
        """The launch ncu runs where it starts with the timeline's (nsightflow.capture.launch.together): its program
        imports what it imports beside the timeline's launches and waits at its first contact (torch's CUDA
        initialisation, ...: nsightflow.capture.inside.gate) until they have ended and the job opens ``gate`` with
        what :meth:`windowed` takes from the manifest (:func:`ncu_stages`); the plan is awaited at the first step."""
        settings = HookSettings("ncu", None, self.domain, self.stages, self.mirror, rank=self.rank)
        gated = replace(settings, gate=str(Path(gate).resolve()), gate_at="contact")
        return self._under_ncu(replace(gated, windows=str(Path(plan_json).resolve()), await_windows=True), plan_json)

    def _under_ncu(self, settings: HookSettings, plan_json: str | Path) -> Launch:
        """The command with the hook in ``settings`` (its site folder beside the plan, in the run's own results)."""
        launch = self.launch(settings, Path(plan_json).resolve().parent)
        if self.gpus > 1:  # ranks on several GPUs: no peer writes into memory ncu restores between replay passes
            launch = replace(launch, env={**REPLAY_SAFE_ENV, **launch.env})
        return replace(launch, awaits_plan=settings.await_windows)


def ncu_stages(manifest: Manifest) -> dict[str, Any]:
    """What ncu's launch of a command takes from its timeline, as its hook's settings name it: the stage domain and
    names, each stage's warm-up steps (followed, never windowed) and the timed run's autotuning choices (ncu's slowed
    timing would pick none). The settings of a launch made after the timeline, the gate's content of one started
    with it."""
    skip: dict[str, list[int]] = {}
    for w in manifest.warmup_steps:
        skip.setdefault(str(w["stage"]), []).append(int(w["step"]))
    stages = [s["name"] for s in manifest.stages]
    return {"domain": manifest.stage_domain, "stages": stages, "skip": skip, "tuning": manifest.autotuning or None}
