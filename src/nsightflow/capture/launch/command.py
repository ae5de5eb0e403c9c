"""A command workload: a program nsightflow did not write, run as its user runs it, its stages its own NVTX ranges.

Each profiling rule runs the command with the hook (nsightflow.capture.inside.hook) loaded at interpreter start:

1. a *timed* run, nothing collecting: every range the program opens, its wall time, and from them the stages
   (:func:`discover`: the configured domain and names, else the top-level ranges of the busiest domain that is not a
   library's own);
2. the profile run: under nsys (the hook mirrors each stage step into nsightflow's domain and runs the probe inside
   it, so the timeline reads as a callable's does, and counts FLOPs; started beside the timed run, its program waits
   until the timed run has ended: nsightflow.capture.inside.gate), or under torch.profiler (then a *count* run);
3. under ncu: the hook opens the capture plan's windows (nsightflow.capture.launch.command_call: the command itself
   and its launches), after the timeline or, config ``ncu.start``, started with it.

The rest of the engine (plan, match, aggregation, report) is the callables' own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nsightflow import files
from nsightflow.capture.inside.gate import open_gate
from nsightflow.capture.inside.hook_settings import HookSettings, records_of
from nsightflow.capture.inside.passes import safe_label
from nsightflow.capture.launch import nsys
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.capture.launch.release import Release
from nsightflow.capture.launch.tools import note, publish_nsys, run_tool, tool_warnings, write_manifest
from nsightflow.capture.read.own_metrics import own_metrics
from nsightflow.errors import CaptureError, CrashError

if TYPE_CHECKING:
    from nsightflow.capture.launch.discovery import Discovery

# The discovery (pandas) is imported where a command's runs are read: a callable's timeline job never reads one, and
# importing pandas before nsys starts cost that job about 0.9 s on the GPU host (1.10 s before nsys, 0.22 s without).


def _run(
    call: CommandCall,
    settings: HookSettings,
    log: str | Path,
    timeout_s: float | None,
    wrap: list[str],
    beside: Callable[[dict[str, str], int], None] | None = None,
    devices: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One run of the command with the hook (under ``wrap``, a profiler's argv prefix): the record of every Python
    process it started (nsightflow.capture.inside.hook_settings.record_path), each with the run's output.
    ``beside``: another run while this one runs (nsightflow.capture.inside.gate); ``devices``: the environment of the
    run this one is beside (its claimed devices: this one runs on them too); ``extra_env``: set for this run only
    (over the workload's)."""
    assert settings.out is not None
    launch = call.launch(settings, Path(settings.out).parent)
    env = {**launch.env, **(extra_env or {})}
    if devices is not None and "CUDA_VISIBLE_DEVICES" in devices:  # the workload's own env: wins, as in run_tool
        env.setdefault("CUDA_VISIBLE_DEVICES", devices["CUDA_VISIBLE_DEVICES"])
    argv, nested = wrap + launch.argv, devices is not None
    out, _ = run_tool(
        argv, log, timeout_s, gpu=not nested, env=env, cwd=launch.cwd, gpus=launch.gpus, beside=beside, nested=nested
    )
    records = []
    for path in records_of(settings.out):
        try:
            records.append({**json.loads(path.read_text()), "output": out})
        except (OSError, json.JSONDecodeError) as exc:
            raise CaptureError(f"{path}: the hook's record of a process is unreadable ({exc}); log: {log}") from exc
    if not records:
        raise CaptureError(
            f"the command {launch.argv} exited without the hook's record: it must be a Python program that "
            f"ends normally (not os._exit), run by an interpreter that can import nsightflow; log: {log}"
        )
    return records


def _record(
    call: CommandCall, found: Discovery, profiled: dict[str, Any], extra: dict[str, Any], ranks: list[dict[str, Any]]
) -> dict[str, Any]:
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
        "every_wall_s": found.every_wall,
        "every_pace_s": found.every_pace,
        "warmup_steps": [asdict(w) for w in found.warmup],
        "autotuning": found.tuning,
        "step_inputs": found.inputs,
        "step_inputs_errors": found.inputs_errors,
        "program_metrics": found.metrics,
        "stages": [{"name": s, "repeats": len(found.walls[s]), "steps": len(found.walls[s])} for s in found.stages],
        "ranks": ranks,
        "profiled_rank": call.rank if ranks else None,
        **extra,
    }


# The count run of a command: compilation off, so that torch.compile (fullgraph=True included) runs the program's
# Python as written, each operator seen by the counting TorchDispatchMode (under such a mode torch.compile skips every
# frame, or raises with fullgraph=True). The model's FLOPs are the same; the measured runs stay compiled.
EAGER = {"TORCHDYNAMO_DISABLE": "1", "TORCH_COMPILE_DISABLE": "1"}


def _count(
    call: CommandCall,
    found: Discovery,
    tmp: str,
    flops: str | Path,
    ceilings: str | Path,
    log: str | Path,
    timeout_s: float | None,
) -> dict[str, Any]:
    """The count run (analytic FLOPs and bytes of the steady steps, the measured ceilings): the counted record."""
    from nsightflow.capture.launch.discovery import primary, same_steps

    settings = HookSettings("count", f"{tmp}/count.json", found.domain, found.stages, call.mirror, dtype=call.dtype)
    settings = replace(
        settings,
        rank=call.rank,
        skip=found.skip,
        flops_out=str(Path(flops).resolve()),
        ceilings_out=str(Path(ceilings).resolve()),
        steps=found.last_steps(),
        end_after_steps=call.steps_window() is not None,  # a window: the program ends after its last step
    )
    counted = primary(_run(call, settings, log, timeout_s, [], extra_env=EAGER), call.rank)
    same_steps(found, counted, "counting")
    return counted


def count_how(found: Discovery, separate: bool) -> str:
    """How a command's analytic count was made, for the report."""
    if not separate:
        return "operators counted in the measured nsys run (the program does not compile)"
    if not found.compiles:
        return "operators counted in a run of its own (the program does not compile)"
    return (
        "operators counted in a run of its own with compilation off (TORCHDYNAMO_DISABLE=1), since the program "
        "compiles (torch.compile made graphs in its timed run) and a counting TorchDispatchMode would make "
        "torch.compile skip its frames; the measured runs ran it compiled, its kernels as it launches them"
    )


def _spans_note(timed: list[dict[str, Any]], runs: list[dict[str, Any]], tool: str) -> str:
    """When each run's program ran (its processes' hooks, from install to record, on the wall clock): where a job's
    time went (its programs' start-up, steps and exit) beside the profiler's own span in the log."""

    def span(records: list[dict[str, Any]]) -> str:
        times = [r["epoch"] for r in records if r.get("epoch")]
        if not times:
            return "not recorded"
        return f"from {min(t[0] for t in times):.3f} to {max(t[1] for t in times):.3f}"

    return f"the timed run's program ran {span(timed)}; under {tool} {span(runs)} (epoch s)"


def _timed(
    call: CommandCall,
    tmp: str,
    log: str | Path,
    timeout_s: float | None,
    beside: tuple[str, int] | None = None,
    devices: dict[str, str] | None = None,
    gate_at: Literal["start", "contact"] = "start",
    also_gated: dict[str, int] | None = None,
) -> tuple[Discovery, list[dict[str, Any]]]:
    """The timed run (nothing collecting), the stages found in the profiled rank's ranges, and every process's
    record. ``beside``: (gate, pid) of a launch gated until this run has ended (nsightflow.capture.inside.gate); its
    program starts (``gate_at`` start), or makes its first contact (contact), once that launch is ready, and every
    launch in ``also_gated`` (gate -> pid: ncu's, started with the timeline's)."""
    from nsightflow.capture.launch.discovery import discover, primary

    gate, pid = beside or (None, None)
    settings = HookSettings("timed", f"{tmp}/timed.json", call.domain, call.stages, rank=call.rank)
    settings = replace(settings, gate=gate, gate_pid=pid, gate_at=gate_at, also_gated=also_gated or {})
    timed = _run(call, settings, log, timeout_s, [], devices=devices)
    mine = primary(timed, call.rank)
    found = discover(
        mine, call.domain, call.stages, call.warmup_steps, window=call.steps_window(), functions=call.step_functions
    )
    tuning = mine.get("autotuning") or {}
    inputs = {k: v for k, v in (mine.get("step_inputs") or {}).items() if k in found.stages}
    found = replace(found, inputs=inputs, inputs_errors=mine.get("step_inputs_errors") or {})
    found = replace(found, metrics=own_metrics(str(mine.get("output") or "")))
    return replace(found, compiles=any(r.get("compiled_graphs") for r in timed), tuning=tuning), timed


def timed_beside(
    call: CommandCall,
    tmp: str,
    log: str | Path,
    timeout_s: float | None,
    profile: HookSettings,
    wrap: list[str],
    also_gated: dict[str, int] | None = None,
    release: Release | None = None,
) -> tuple[Discovery, list[dict[str, Any]], list[dict[str, Any]]]:
    """The timed run, and the ``profile`` run (under ``wrap``) beside it, gated until the timed run has found the
    stages (nsightflow.capture.inside.gate): (the stages, the timed and the profile run's records). ``also_gated``:
    other gated launches (gate -> pid) the timed run waits for too, which ``release`` lets go with the stages once
    every process of the profile run has written its record (a program that compiles: later, see
    nsightflow.capture.launch.release)."""
    gate = f"{tmp}/stages.json"
    timed_run: list[tuple[Discovery, list[dict[str, Any]]]] = []

    def timed_first(devices: dict[str, str], pid: int) -> None:
        beside = (gate, pid)
        timed_run.append(_timed(call, tmp, log, timeout_s, beside, devices, profile.gate_at, also_gated))
        found = timed_run[0][0]
        opened = {"domain": found.domain, "stages": found.stages, "skip": found.skip, "probe": not found.compiles}
        opened.update(tuning=found.tuning, steps=found.last_steps())
        open_gate(gate, opened)
        if release is not None:  # ncu's launch: the stages as it takes them (command_call.ncu_stages)
            ncu = {k: opened[k] for k in ("domain", "stages", "skip")} | {"tuning": found.tuning or None}
            release.watch(ncu, str(profile.out), len(timed_run[0][1]), early=not found.compiles)

    runs = _run(call, replace(profile, gate=gate), log, timeout_s, wrap, beside=timed_first)
    return timed_run[0][0], timed_run[0][1], runs


def timeline(
    nsys_bin: str, call: CommandCall, rep: str | Path, sqlite_out: str | Path, out: ProfileOutputs, run: RunSettings
) -> None:
    """The timed run, and nsys over the probe run started beside it (its program gated until the timed run has
    found the stages: nsightflow.capture.inside.gate): the timeline, analytic count, ceilings and manifest. The
    launches ``run`` says were started with it (``also_gated``) are waited for by the timed run too, and let go with
    the stages once the GPU is free of the timeline's programs (nsightflow.capture.launch.release)."""
    from nsightflow.capture.launch.discovery import primary, rank_rows, same_steps

    manifest, flops, ceilings, log, timeout_s = out.manifest, out.flops, out.ceilings, out.log, run.timeout_s
    with files.scratch(Path(manifest).parent, "nsightflow-command") as tmp:
        probe = HookSettings(
            "probe",
            f"{tmp}/probe.json",
            call.domain,
            call.stages,
            call.mirror,
            dtype=call.dtype,
            flops_out=str(Path(flops).resolve()),
            ceilings_out=str(Path(ceilings).resolve()),
            rank=call.rank,
            capture_range=call.steps_window() is not None,  # a window: nsys traces its steps only
            end_after_steps=call.steps_window() is not None,  # and the program ends after them
            gate_at="contact",  # both launches import the program's libraries at once
        )
        rep = Path(rep)
        tmp_base = rep.with_name(rep.stem + ".tmp")
        wrap = nsys.profile_argv(nsys_bin, tmp_base, [], capture_range="stop" if probe.capture_range else "")
        release = Release(run.also_gated, log)
        try:
            found, timed, runs = timed_beside(call, tmp, log, timeout_s, probe, wrap, run.also_gated, release)
        finally:
            release.stop()
        if not found.compiles:
            release.at_end(time.monotonic())
        profiled = primary(runs, call.rank)
        note(log, _spans_note(timed, runs, "nsys"))
        same_steps(found, profiled, "nsys")
        publish_nsys(tmp_base, rep, sqlite_out, log)
        # A program that compiles ran unprobed under nsys (the gate said so): it is counted in a run of its own.
        counted = _count(call, found, tmp, flops, ceilings, log, timeout_s) if found.compiles else profiled
        if found.compiles:  # its count run used the GPU too
            release.at_end(time.monotonic())
        harness_json = Path(tmp) / "harness.json"
        extra = {k: counted[k] for k in ("dtype", "precision", "precision_source", "precision_level", "precision_why")}
        extra.update(environment=counted["environment"], analytic_how=count_how(found, found.compiles))
        extra.update(program_memory=profiled.get("program_memory"))  # as it runs under nsys (compiled: as it is)
        files.write_json(harness_json, _record(call, found, profiled, extra, rank_rows(timed, runs, found)))
        commands = [
            {"what": "the command, timed (no profiler; the one under nsys waits for it)", "argv": call.argv()},
            {
                "what": "Timeline (nsys) of the command"
                + (" as it runs (compiled)" if found.compiles else " with the probe, analytic count and ceilings"),
                "argv": wrap + call.argv(),
            },
        ]
        if found.compiles:
            commands.append({"what": "the command with the operator count (compilation off)", "argv": call.argv()})
        write_manifest(harness_json, manifest, run.versions, commands, run.settings, tool_warnings(profiled["output"]))


def torch_profile(call: CommandCall, trace: str | Path, out: ProfileOutputs, run: RunSettings) -> None:
    """The timed run, the command under torch.profiler (its steps as ``record_function`` ranges), then a count run
    (analytic FLOPs and the measured ceilings), and the run's manifest."""
    from nsightflow.capture.launch.discovery import primary, rank_rows, same_steps

    manifest, flops, ceilings, log, timeout_s = out.manifest, out.flops, out.ceilings, out.log, run.timeout_s
    with files.scratch(Path(manifest).parent, "nsightflow-command") as tmp:
        found, timed = _timed(call, tmp, log, timeout_s)
        labels = {s: safe_label(i, s) for i, s in enumerate(found.stages)}

        hook = HookSettings("torch", f"{tmp}/torch.json", found.domain, found.stages, call.mirror, labels)
        hook = replace(hook, dtype=call.dtype, rank=call.rank, trace=str(Path(trace).resolve()), skip=found.skip)
        hook = replace(hook, steps=found.last_steps(), tuning=found.tuning or None)
        hook = replace(hook, end_after_steps=call.steps_window() is not None)  # a window: the program ends after it
        try:
            runs = _run(call, hook, log, timeout_s, [])
        except CrashError as exc:
            # torch.profiler's native library (kineto) corrupts its heap now and then (a rank of a two-rank CPU
            # program aborted with "malloc(): unsorted double linked list corrupted" once in a dozen test sessions,
            # then ran clean nine times): one more run, said in the log; a program that dies so again fails the job
            note(log, f"the program under torch.profiler died of {exc.signal_name}: it runs once more")
            for path in records_of(str(hook.out)):  # the failed run's
                path.unlink()
            runs = _run(call, hook, log, timeout_s, [])
        profiled = primary(runs, call.rank)
        note(log, _spans_note(timed, runs, "torch.profiler"))
        same_steps(found, profiled, "torch.profiler")
        counted = _count(call, found, tmp, flops, ceilings, log, timeout_s)
        extra = {k: counted[k] for k in ("dtype", "precision", "precision_source", "precision_level", "precision_why")}
        extra.update(
            environment=counted["environment"],
            trace_labels=profiled["trace_labels"],
            analytic_how=count_how(found, True),
            # the count run's, where it runs the program as it is (it runs a compiling program eager)
            program_memory=None if found.compiles else counted.get("program_memory"),
        )
        harness_json = Path(tmp) / "harness.json"
        files.write_json(harness_json, _record(call, found, profiled, extra, rank_rows(timed, runs, found)))
        commands = [
            {"what": "the command, timed (no profiler)", "argv": call.argv()},
            {"what": "the command under torch.profiler", "argv": call.argv()},
            {"what": "the command with the operator count and ceilings (compilation off)", "argv": call.argv()},
        ]
        write_manifest(harness_json, manifest, run.versions, commands, run.settings, tool_warnings(profiled["output"]))
