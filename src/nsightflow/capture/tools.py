"""Run the profilers: argv lists only, logs kept, outputs atomic, empty captures diagnosed.

Each function is what one workflow rule does; all are usable from a notebook too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsightflow import files
from nsightflow.capture import children, ncu, ncu_csv, nsys
from nsightflow.capture.harness import HarnessCall, Launch
from nsightflow.capture.matching import match_to_plan
from nsightflow.capture.plan import CapturePlan, expected_frame
from nsightflow.capture.progress import LaunchProgress
from nsightflow.errors import ToolError
from nsightflow.records import AnalyticCounts, CaptureRecord, Manifest


def run_tool(
    argv: list[str],
    log: str | Path,
    timeout_s: float | None = None,
    check: bool = True,
    gpu: bool = False,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    gpus: int = 1,
) -> tuple[str, int]:
    """Run ``argv`` (never through a shell; ``env`` added to the environment, in ``cwd``), append its output to
    ``log``; return (output, exit code).

    With ``gpu`` the child runs on ``gpus`` devices of its own (see nsightflow.capture.gpus.claim). With ``check``
    a non-zero exit raises ToolError with the output's last lines.
    """
    from nsightflow.capture.gpus import claim

    require(argv[0])
    with claim(n_devices=None if gpu else 0, want=gpus) as (child_env, decision):
        started = time.time()
        try:
            stdout, code = children.run(argv, {**child_env, **(env or {})}, timeout_s, on_line, cwd)
        except subprocess.TimeoutExpired as exc:
            _append(log, argv, (exc.output or "") + f"\n[nsightflow] stopped after the {timeout_s} s timeout\n")
            raise ToolError(f"{argv[0]} did not finish within {timeout_s} s (config: timeout_s); log: {log}") from exc
        except (KeyboardInterrupt, children.Stopped) as exc:
            _append(
                log,
                argv,
                f"\n[nsightflow] stopped ({type(exc).__name__} {exc}): the tool and its program were killed\n",
            )
            raise
    gpu_note = f"[nsightflow] {decision}; ran from {started:.3f} to {time.time():.3f}\n" if gpu else ""
    gpu_note += harmless_notes(stdout)
    how = children.describe_exit(code)
    try:
        _append(log, argv, gpu_note + stdout + f"\n[nsightflow] {Path(argv[0]).name} {how}\n")
    except OSError as exc:  # a full disk must not hide why the tool failed
        if check and code != 0:
            raise ToolError(
                f"{Path(argv[0]).name} {how}; the log could not be written ({exc})\n{failure_lines(stdout)}"
            ) from exc
        raise
    if check and code != 0:
        raise ToolError(f"{Path(argv[0]).name} {how}; log: {log}\n{failure_lines(stdout)}")
    return stdout, code


# Lines libraries print that look alarming and are not, with what they mean (written into the job's log).
HARMLESS = [
    (
        "gpuGetDeviceCount failed",
        "'ERROR ... gpuGetDeviceCount failed' comes from torch.profiler's library (kineto) "
        "looking for a CUDA device on a machine without one: harmless, the CPU trace is complete",
    ),
    ("SyncActivityProfilerHandler", "'USDT ... profiler_start/profiler_stop' lines are kineto's trace markers"),
]


def harmless_notes(output: str) -> str:
    """A note for each known harmless message in ``output``, so a log that says ERROR is not misread."""
    return "".join(f"[nsightflow] note: {why}\n" for needle, why in HARMLESS if needle in output)


def failure_lines(output: str, tail: int = 10) -> str:
    """What explains a failed run: the harness's own error (``nsightflow: ...``) and the last lines of a
    traceback, wherever they are in the output, then its last lines (a profiler prints progress after the
    program has failed)."""
    lines = output.strip().splitlines()
    why = [ln for ln in lines if ln.startswith("nsightflow: ")]
    if not why and "Traceback (most recent call last):" in output:
        start = max(i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last):"))
        why = [ln for ln in lines[start:] if ln and not ln.startswith(("[", "==PROF==", "Generated:"))][-6:]
    return "\n".join(dict.fromkeys(why + lines[-tail:]))


def require(binary: str) -> None:
    """Raise ToolError naming the fix when ``binary`` is neither on PATH nor a file."""
    from nsightflow.capture.backend import found

    if not found(binary):
        raise ToolError(f"{binary!r} not found on PATH: install it or set its path under `tools:` in the config")


def _append(log: str | Path, argv: list[str], text: str) -> None:
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n" + text)


def timeline(
    nsys_bin: str,
    call: HarnessCall,
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
    """nsys profile → ``rep`` (.nsys-rep) and its SQLite export, the analytic count and the measured ceilings from
    the same launch, and the run's manifest. The harness times every step first with nothing traced (``timed``),
    then opens nsys's capture range for the ranged and probe passes."""
    rep = Path(rep)
    tmp_base = rep.with_name(rep.stem + ".tmp")
    harness_json = Path(str(manifest) + ".harness.json")
    program = replace(call, timed=True, out=str(harness_json), flops_out=str(flops), ceilings_out=str(ceilings))
    argv = nsys.profile_argv(nsys_bin, tmp_base, program.argv(), capture_range=True)
    out, _ = run_tool(argv, log, timeout_s, gpu=True)
    publish_nsys(tmp_base, rep, sqlite_out, log)
    what = "Timeline (nsys), wall times, analytic count and ceilings in the same launch"
    write_manifest(harness_json, manifest, versions, [{"what": what, "argv": argv}], settings, tool_warnings(out))
    harness_json.unlink()


def publish_nsys(tmp_base: Path, rep: Path, sqlite_out: str | Path, log: str | Path) -> None:
    """Publish the .nsys-rep and SQLite export nsys wrote at ``tmp_base``, or say what is missing."""
    produced = Path(str(tmp_base) + ".nsys-rep")
    if not produced.exists():
        raise ToolError(f"nsys wrote no .nsys-rep (only a .qdstrm?): its importer may lack libdw.so.1; log: {log}")
    exported = Path(str(tmp_base) + ".sqlite")
    if not exported.exists():
        raise ToolError(f"nsys wrote no SQLite export beside {produced.name} (--export=sqlite); log: {log}")
    files.publish(exported, Path(sqlite_out))
    files.publish(produced, rep)


def tool_warnings(output: str) -> list[str]:
    """Warning lines a profiler or the workload printed (kept for the report's diagnostics)."""
    return [ln.strip() for ln in output.splitlines() if "warning" in ln.lower()][:50]


def write_manifest(
    harness_json: str | Path,
    manifest: str | Path,
    versions: dict,
    commands: list[dict],
    settings: dict | None = None,
    warnings: list[str] | None = None,
) -> Manifest:
    """The run's manifest: the harness's record (args, params, environment), the settings that shaped
    the run, tool versions, the host (GPU, driver) and the commands that ran."""
    from nsightflow.capture.backend import host_info

    harness = Manifest.read(harness_json)
    env = harness.environment
    record = replace(
        harness,
        versions={**versions, **{k: env.get(k) for k in ("torch", "cuda", "python", "device_name")}},
        settings=settings or {},
        host=host_info(),
        commands=commands,
        warnings=warnings or [],
    )
    record.write(manifest)
    return record


def torch_profile(
    call: HarnessCall,
    trace: str | Path,
    manifest: str | Path,
    flops: str | Path,
    ceilings: str | Path,
    log: str | Path,
    versions: dict,
    settings: dict,
    timeout_s: float | None = None,
) -> None:
    """The workload under torch.profiler → Chrome trace ``trace``; the analytic count and the measured
    ceilings ride on the same program launch; and the run's manifest."""
    harness_json = Path(str(manifest) + ".harness.json")
    argv = replace(
        call, mode="torch", trace=str(trace), out=str(harness_json), flops_out=str(flops), ceilings_out=str(ceilings)
    ).argv()
    out, _ = run_tool(argv, log, timeout_s, gpu=True)
    write_manifest(
        harness_json,
        manifest,
        versions,
        [{"what": "torch.profiler run (harness)", "argv": argv}],
        settings,
        tool_warnings(out),
    )
    harness_json.unlink()


def stats(nsys_bin: str, rep: str | Path, out_dir: str | Path, sqlite_out: str | Path, log: str | Path) -> None:
    """nsys stats CSVs into ``out_dir`` (nvtx_sum.csv, ...) and the SQLite export to ``sqlite_out``."""
    rep, out_dir = Path(rep), Path(out_dir)
    tmp = files.staging(out_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy(rep, tmp / "timeline.nsys-rep")  # stats writes its .sqlite beside the report
    run_tool(nsys.stats_argv(nsys_bin, tmp / "timeline.nsys-rep", tmp / "stats"), log)
    for report in nsys.STATS_REPORTS:
        src = tmp / f"stats_{report}.csv"
        if not src.exists():
            raise ToolError(f"nsys stats wrote no {src.name}; log: {log}")
        os.replace(src, tmp / f"{report}.csv")
    os.replace(tmp / "timeline.sqlite", Path(sqlite_out))
    (tmp / "timeline.nsys-rep").unlink()
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)


@dataclass
class Counters:
    """Which FLOP counters a capture collects, and why (each tensor precision costs a replay pass; the SASS
    counts of non-tensor FLOPs an instrumented run of every profiled launch)."""

    precisions: list[str]
    non_tensor: bool
    seen: list[str] | None  # the GEMM and attention precisions the probe pass saw; None: it could not tell
    simt_share: float | None = None  # largest share of a stage's analytic FLOPs in FMA-unit GEMMs and attentions
    seen_how: list[str] = field(default_factory=list)  # per stage, where its precisions came from


def capture_counters(
    precisions: ncu.TensorPrecisions, non_tensor: ncu.NonTensorFlops, flops_json: str | Path, plan_json: str | Path
) -> Counters:
    """The FLOP counters of a run's capture (config ``ncu.tensor_precisions``, ``ncu.non_tensor_flops``), from
    the GEMM and attention operators the probe pass saw in the planned stages
    (nsightflow.capture.ncu.seen_precisions)."""
    plan = CapturePlan.read(plan_json)
    analytic = AnalyticCounts.read(flops_json)
    seen, how = ncu.seen_precisions(analytic, [(e["stage"], int(e["unit"])) for e in plan.expected])
    share = ncu.simt_share(analytic, list(plan.stages))
    return Counters(
        ncu.tensor_precisions(precisions, seen), ncu.non_tensor_flops(non_tensor, seen, share), seen, share, how
    )


def ncu_capture(
    ncu_bin: str,
    plan_json: str | Path,
    program: Launch,
    rep: str | Path,
    csv_out: str | Path,
    cmd_json: str | Path,
    log: str | Path,
    *,
    metrics: ncu.MetricSpec,
    extra_metrics: list[str],
    counters: Counters,
    sections: list[str],
    replay_mode: ncu.ReplayMode,
    clock_control: ncu.ClockControl,
    cache_control: ncu.CacheControl,
    timeout_s: float | None,
    ranges: bool = False,
    details_out: str | Path | None = None,
) -> None:
    """One ncu run of the whole program (``--profile-from-start off``; ``program``, the harness or a command's hook,
    opens the plan's windows),
    exported to raw CSV and checked against the plan before anything is published: every planned launch
    profiled, nothing else, in order, with matching grid, block and name (ranges: one result per window).
    The default metrics collect the FLOP counters ``counters`` names."""
    plan = CapturePlan.read(plan_json)
    rep = Path(rep)
    tmp_base = rep.with_name(rep.name.removesuffix(".ncu-rep") + ".tmp")
    produced = Path(str(tmp_base) + ".ncu-rep")
    expected = len(plan.windows) if ranges else len(plan.expected)
    what = (
        f"{len(plan.windows)} range windows"
        if ranges
        else f"{expected} planned launches in {len(plan.windows)} windows ({plan.mode})"
    )
    argv = ncu.capture_argv(
        ncu_bin,
        tmp_base,
        program.argv,
        metrics=ncu.resolve_metrics(
            metrics, extra_metrics, counters.precisions, non_tensor=counters.non_tensor, ranges=ranges
        ),
        sections=sections,
        replay_mode=replay_mode,
        clock_control=clock_control,
        cache_control=cache_control,
    )
    progress = None if ranges else LaunchProgress(f"ncu {Path(log).parent.parent}", plan.expected)
    out, rc = run_tool(
        argv,
        log,
        timeout_s,
        check=False,
        gpu=True,
        on_line=progress,
        env=program.env,
        cwd=program.cwd,
        gpus=program.gpus,
    )
    ncu.check_capture(out, rc, what=what, expected=expected)
    if not produced.exists():
        raise ToolError(f"ncu wrote no report for {what}; log: {log}")
    text = export(ncu_bin, produced, log)
    raw, _ = ncu_csv.parse_raw_csv(text, f"the raw export of {rep.name}")
    if ranges:
        if len(raw) != expected:
            raise ToolError(f"range capture: {len(raw)} results for {expected} windows; log: {log}")
    else:
        match_to_plan(ncu_csv.result_metrics(raw), expected_frame(plan), rep.name)  # raises on any disagreement
    record = CaptureRecord(
        argv=argv,
        what="ranges" if ranges else plan.mode,
        replay_mode=replay_mode,
        report=rep.name,
        results=len(raw),
        warnings=ncu.warnings(out),
        clock_control=clock_control,
        tensor_precisions=counters.precisions if metrics == "default" else None,
        non_tensor_flops=counters.non_tensor if metrics == "default" else None,
        precisions_seen=counters.seen,
        precisions_how=counters.seen_how,
        simt_share=counters.simt_share,
    )
    files.write_text(Path(csv_out), text)
    if details_out is not None:  # the sections as ncu prints them, with its rule messages
        files.write_text(Path(details_out), export(ncu_bin, produced, log, page="details"))
    record.write(cmd_json)
    files.publish(produced, rep)


def export(ncu_bin: str, rep: str | Path, log: str | Path, page: str = "raw") -> str:
    """``ncu --import --page raw --csv --print-units base`` of a report: the CSV text (checked to parse); with
    ``page='details'`` the details page as ncu prints it, rule messages included."""
    argv = ncu.export_argv(ncu_bin, rep) if page == "raw" else ncu.details_argv(ncu_bin, rep)
    require(ncu_bin)
    proc = subprocess.run(argv, capture_output=True, text=True)
    _append(log, argv, proc.stderr + f"\n[nsightflow] exit code {proc.returncode}\n")
    if proc.returncode != 0:
        raise ToolError(f"ncu --import failed with {proc.returncode}; log: {log}")
    if page == "raw":
        ncu_csv.parse_raw_csv(proc.stdout, f"the raw export of {Path(rep).name}")  # raises on a malformed export
    return proc.stdout
