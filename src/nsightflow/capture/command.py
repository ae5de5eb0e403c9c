"""A command workload: a program nsightflow did not write, run as its user runs it, its stages its own NVTX ranges.

Each profiling rule runs the command with the hook (nsightflow.capture.hook) loaded at interpreter start:

1. a *timed* run, nothing collecting: every range the program opens, its wall time, and from them the stages
   (:func:`discover`: the configured domain and names, else the top-level ranges of the busiest domain that is not a
   library's own);
2. the profile run: under nsys (the hook mirrors each stage step into nsightflow's domain and runs the probe inside
   it, so the timeline reads as a callable's does, and counts FLOPs), or under torch.profiler (then a *count* run);
3. under ncu: the hook opens the capture plan's windows (:meth:`CommandCall.launch` with the plan).

The rest of the engine (plan, match, aggregation, report) is the callables' own.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nsightflow import files
from nsightflow.capture import nsys
from nsightflow.capture.attribution import top_level
from nsightflow.capture.harness import HarnessCall, Launch
from nsightflow.capture.hook import site_dir
from nsightflow.capture.passes import safe_label
from nsightflow.capture.tools import publish_nsys, run_tool, tool_warnings, write_manifest
from nsightflow.domains import DEFAULT_DOMAIN, LIBRARY_DOMAINS, is_nsightflows_own
from nsightflow.errors import CaptureError, ConfigError, WorkloadError
from nsightflow.records import HOOK_ENV, HookMode, HookSettings, Manifest

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill(argv: list[str], args: dict) -> list[str]:
    """The command's argv with each ``{name}`` replaced by the run's value of ``name`` (its args and sweep point)."""

    def value(m: re.Match) -> str:
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
    args: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    cwd: str | None = None
    domain: str | None = None  # the program's NVTX domain of its stages; None: discovered
    stages: list[str] | None = None  # its stage range names; None: the domain's top-level ranges
    mirror: str = DEFAULT_DOMAIN  # nsightflow's own domain (config nvtx_domain)
    dtype: str | None = None

    def argv(self) -> list[str]:
        return fill(self.command, self.args)

    def launch(self, settings: HookSettings) -> Launch:
        """The command with the hook: its site folder first on ``PYTHONPATH``, the settings in the environment."""
        env = {k: str(v) for k, v in self.env.items()}
        path = [str(site_dir()), env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        env[HOOK_ENV] = settings.to_env()
        return Launch(self.argv(), env, self.cwd)

    def windowed(self, plan_json: str | Path, manifest: Manifest) -> Launch:
        """The launch ncu runs: the hook opens the plan's windows in the stages the timeline found."""
        settings = HookSettings(
            mode="ncu",
            out=None,
            domain=manifest.stage_domain,
            stages=[s["name"] for s in manifest.stages],
            mirror=self.mirror,
            windows=str(Path(plan_json).resolve()),
        )
        return self.launch(settings)


def program_call(fields: dict) -> HarnessCall | CommandCall:
    """The call a rule's ``harness`` params describe: a command workload's or a callable's."""
    return CommandCall(**fields) if "command" in fields else HarnessCall(**fields)


def program_launch(fields: dict, plan_json: str | Path, manifest: str | Path) -> Launch:
    """What ncu runs for the plan ``plan_json``."""
    call = program_call(fields)
    if isinstance(call, CommandCall):
        return call.windowed(plan_json, Manifest.read(manifest))
    return call.windowed(plan_json)


@dataclass(frozen=True)
class Discovery:
    """The stages a timed run of a command found: their domain, names (first seen first), and steps' wall times."""

    domain: str
    stages: list[str]
    walls: dict[str, list[float]]
    how: str


RANGE_COLUMNS = ["domain", "name", "depth", "tid", "start", "end"]


def discover(record: dict, domain: str | None, stages: list[str] | None) -> Discovery:
    """The stage steps of a command's timed run (its hook record): the ranges of ``domain`` named ``stages`` (else
    its top-level ones), one at a time (a stage range inside another step is part of that step). Without a domain,
    the candidate (not a library's, not nsightflow's) whose top-level ranges hold the most wall time."""
    ranges = pd.DataFrame(record.get("ranges") or [], columns=RANGE_COLUMNS)
    how = f"the configured domain {domain!r}"
    if domain is None:
        cand = ranges[
            ~ranges["domain"].str.lower().isin(LIBRARY_DOMAINS)
            & ~ranges["domain"].map(is_nsightflows_own).astype(bool)
            & (ranges["depth"] == 0)
        ]
        if cand.empty:
            raise WorkloadError(
                "the command opened no NVTX push/pop range nsightflow could follow: put its stages inside "
                "nvtx.annotate('name', domain='...') or torch.cuda.nvtx.range('name') (a Python program), or give "
                "the workload's domain: and stages:"
            )
        time_in = (cand["end"] - cand["start"]).groupby(cand["domain"]).sum()
        domain = str(time_in.idxmax())
        how = f"the domain whose top-level ranges hold the most time ({time_in[domain] / 1e9:.3f} s)"
    mine = ranges[ranges["domain"] == domain]
    if stages is not None:
        mine = mine[mine["name"].isin(stages)]
    else:
        mine = mine[mine["depth"] == 0]
    # one step at a time: a stage range inside another step (an enclosing range first) is part of that step
    mine = top_level(mine.sort_values(["start", "end"], ascending=[True, False]))
    seen = sorted(set(ranges.loc[ranges["domain"] == domain, "name"]))
    missing = [s for s in stages or [] if s not in set(mine["name"])]
    if mine.empty or missing:
        raise WorkloadError(
            f"the command's NVTX domain {domain!r} has no range named {missing or stages}: it has "
            f"{seen[:20] or 'none'}; fix the workload's stages: (or domain:, '' for the default domain)"
        )
    walls: dict[str, list[float]] = {}
    for name, start, end in zip(mine["name"], mine["start"], mine["end"], strict=True):
        walls.setdefault(str(name), []).append((end - start) / 1e9)
    return Discovery(domain, list(walls), walls, how)


def _run(call: CommandCall, settings: HookSettings, log: str | Path, timeout_s: float | None, wrap: list[str]) -> dict:
    """One run of the command with the hook (under ``wrap``, a profiler's argv prefix); its hook record."""
    launch = call.launch(settings)
    out, _ = run_tool(wrap + launch.argv, log, timeout_s, gpu=True, env=launch.env, cwd=launch.cwd)
    assert settings.out is not None
    try:
        record = json.loads(Path(settings.out).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CaptureError(
            f"the command {launch.argv} exited without the hook's record ({exc}): it must be a Python program that "
            f"ends normally (not os._exit), run by an interpreter that can import nsightflow; log: {log}"
        ) from exc
    record["output"] = out
    return record


def _same_steps(timed: Discovery, other: dict, what: str) -> None:
    got = {k: len(v) for k, v in (other.get("steps") or {}).items()}
    want = {k: len(v) for k, v in timed.walls.items()}
    if got != want:
        raise CaptureError(
            f"the command ran other stage steps in its {what} run {got} than in its timed run {want}: a program "
            "whose ranges change from run to run cannot be sampled (seed it, or fix its step count)"
        )


def _record(call: CommandCall, found: Discovery, profiled: dict, extra: dict) -> dict:
    """The harness-shaped record of a command's runs (nsightflow.records.Manifest's fields)."""
    return {
        "callable": "",
        "command": call.argv(),
        "args": call.args,
        "domain": call.mirror,
        "stage_domain": found.domain,
        "stage_domain_how": found.how,
        "params": {},
        "iterations": 1,
        "stage_wall_s": profiled.get("steps") or {},
        "program_wall_s": found.walls,
        "stages": [{"name": s, "repeats": len(found.walls[s]), "steps": len(found.walls[s])} for s in found.stages],
        **extra,
    }


def _timed(call: CommandCall, tmp: str, log: str | Path, timeout_s: float | None) -> Discovery:
    """The timed run (nothing collecting) and the stages found in it."""
    timed = _run(call, HookSettings("timed", f"{tmp}/timed.json", call.domain, call.stages), log, timeout_s, [])
    return discover(timed, call.domain, call.stages)


def timeline(
    nsys_bin: str,
    call: CommandCall,
    rep: str | Path,
    sqlite_out: str | Path,
    manifest: str | Path,
    flops: str | Path,
    ceilings: str | Path,
    log: str | Path,
    versions: dict,
    settings: dict,
    timeout_s: float | None,
) -> None:
    """The timed run, then nsys over the probe run: the timeline, analytic count, ceilings and manifest."""
    with tempfile.TemporaryDirectory(prefix="nsightflow-command-") as tmp:
        found = _timed(call, tmp, log, timeout_s)
        probe = HookSettings(
            "probe",
            f"{tmp}/probe.json",
            found.domain,
            found.stages,
            call.mirror,
            dtype=call.dtype,
            flops_out=str(Path(flops).resolve()),
            ceilings_out=str(Path(ceilings).resolve()),
        )
        rep = Path(rep)
        tmp_base = rep.with_name(rep.stem + ".tmp")
        wrap = nsys.profile_argv(nsys_bin, tmp_base, [])
        profiled = _run(call, probe, log, timeout_s, wrap)
        _same_steps(found, profiled, "nsys")
        publish_nsys(tmp_base, rep, sqlite_out, log)
        harness_json = Path(tmp) / "harness.json"
        extra = {k: profiled[k] for k in ("dtype", "precision", "precision_source", "precision_level", "precision_why")}
        extra["environment"] = profiled["environment"]
        files.write_json(harness_json, _record(call, found, profiled, extra))
        commands = [
            {"what": "the command, timed (no profiler)", "argv": call.argv()},
            {
                "what": "Timeline (nsys) of the command with the probe, analytic count and ceilings",
                "argv": wrap + call.argv(),
            },
        ]
        write_manifest(harness_json, manifest, versions, commands, settings, tool_warnings(profiled["output"]))


def torch_profile(
    call: CommandCall,
    trace: str | Path,
    manifest: str | Path,
    flops: str | Path,
    ceilings: str | Path,
    log: str | Path,
    versions: dict,
    settings: dict,
    timeout_s: float | None = None,
) -> None:
    """The timed run, the command under torch.profiler (its steps as ``record_function`` ranges), then a count run
    (analytic FLOPs and the measured ceilings), and the run's manifest."""
    with tempfile.TemporaryDirectory(prefix="nsightflow-command-") as tmp:
        found = _timed(call, tmp, log, timeout_s)
        labels = {s: safe_label(i, s) for i, s in enumerate(found.stages)}

        def hook(mode: HookMode, **paths: str) -> HookSettings:
            out = f"{tmp}/{mode}.json"
            return HookSettings(mode, out, found.domain, found.stages, call.mirror, labels, call.dtype, **paths)

        profiled = _run(call, hook("torch", trace=str(Path(trace).resolve())), log, timeout_s, [])
        _same_steps(found, profiled, "torch.profiler")
        counted = _run(
            call,
            hook("count", flops_out=str(Path(flops).resolve()), ceilings_out=str(Path(ceilings).resolve())),
            log,
            timeout_s,
            [],
        )
        _same_steps(found, counted, "counting")
        extra = {k: counted[k] for k in ("dtype", "precision", "precision_source", "precision_level", "precision_why")}
        extra.update(environment=counted["environment"], trace_labels=profiled["trace_labels"])
        harness_json = Path(tmp) / "harness.json"
        files.write_json(harness_json, _record(call, found, profiled, extra))
        commands = [
            {"what": "the command, timed (no profiler)", "argv": call.argv()},
            {"what": "the command under torch.profiler", "argv": call.argv()},
            {"what": "the command with the operator count and ceilings", "argv": call.argv()},
        ]
        write_manifest(harness_json, manifest, versions, commands, settings, tool_warnings(profiled["output"]))


def profile_timeline(nsys_bin: str, fields: dict, *rest: object, **kw: object) -> None:
    """Rule timeline for either kind of workload (see nsightflow.capture.tools.timeline, :func:`timeline`)."""
    from nsightflow.capture import tools

    call = program_call(fields)
    run = timeline if isinstance(call, CommandCall) else tools.timeline
    run(nsys_bin, call, *rest, **kw)  # type: ignore[arg-type]


def profile_torch(fields: dict, *rest: object, **kw: object) -> None:
    """Rule torch_profile for either kind of workload (see nsightflow.capture.tools.torch_profile,
    :func:`torch_profile`)."""
    from nsightflow.capture import tools

    call = program_call(fields)
    run = torch_profile if isinstance(call, CommandCall) else tools.torch_profile
    run(call, *rest, **kw)  # type: ignore[arg-type]
