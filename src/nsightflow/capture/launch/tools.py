"""Run the profilers: argv lists only, logs kept, outputs atomic, empty captures diagnosed.

Each function is what one workflow rule does; all are usable from a notebook too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nsightflow import files
from nsightflow.capture.inside.harness import HarnessCall
from nsightflow.capture.launch import children, nsys
from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.errors import CrashError, ToolError
from nsightflow.records import Manifest


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
    beside: Callable[[dict[str, str], int], None] | None = None,
    nested: bool = False,
) -> tuple[str, int]:
    """Run ``argv`` (never through a shell; ``env`` added to the environment, in ``cwd``), its output appended to
    ``log`` as it comes (a ``nested`` run's, which runs beside another, as one block when it ends); return (output,
    exit code).

    With ``gpu`` the child runs on ``gpus`` devices of its own (see nsightflow.capture.launch.gpus.claim). With
    ``check`` a non-zero exit raises ToolError with the output's last lines. ``beside(environment, pid)`` runs while
    the tool (process ``pid``) runs, a ``nested`` run_tool in it on the same devices
    (nsightflow.capture.launch.children.run).
    """
    from nsightflow.capture.launch.gpus import claim
    from nsightflow.capture.launch.hostfacts import as_the_user_set

    require(argv[0])
    live = None if nested else LiveLog(log, argv)
    with claim(n_devices=None if gpu else 0, want=gpus) as (child_env, decision):
        started = time.time()
        inner = None if beside is None else lambda pid: beside(child_env, pid)
        seen = on_line if live is None else live.follow(on_line)
        try:
            program_env = {**as_the_user_set(child_env), **(env or {})}
            stdout, code = children.run(argv, program_env, timeout_s, seen, cwd, inner, nested)
        except subprocess.TimeoutExpired as exc:
            said = f"\n[nsightflow] stopped after the {timeout_s} s timeout\n"
            _end_log(log, argv, live, exc.output or "", said)
            raise ToolError(f"{argv[0]} did not finish within {timeout_s} s (config: timeout_s); log: {log}") from exc
        except (KeyboardInterrupt, children.Stopped) as exc:
            said = (
                f"\n[nsightflow] stopped ({type(exc).__name__} {exc}): the tool and its program were killed"
                + "".join(f"\n[nsightflow] {n}" for n in getattr(exc, "__notes__", []))
                + "\n"
            )
            _end_log(log, argv, live, "", said)
            raise
        except BaseException as exc:  # a run beside it gave up (a plan that needs other counters): the log is closed
            if live is not None:
                live.end("", f"\n[nsightflow] stopped: {type(exc).__name__}: {str(exc)[:300]}\n")
            raise
    gpu_note = f"[nsightflow] {decision}; ran from {started:.3f} to {time.time():.3f}\n" if gpu else ""
    gpu_note += harmless_notes(stdout)
    how = children.describe_exit(code)
    try:
        _end_log(log, argv, live, stdout, "\n" + gpu_note + f"[nsightflow] {Path(argv[0]).name} {how}\n")
    except OSError as exc:  # a full disk must not hide why the tool failed
        if check and code != 0:
            raise ToolError(
                f"{Path(argv[0]).name} {how}; the log could not be written ({exc})\n{failure_lines(stdout)}"
            ) from exc
        raise
    if check and code != 0:
        message = f"{Path(argv[0]).name} {how}; log: {log}\n{failure_lines(stdout)}"
        crashed = crash_signal(code, stdout)
        raise ToolError(message) if crashed is None else CrashError(message, crashed)
    return stdout, code


# Signals a process dies of by its own fault (not SIGKILL or SIGTERM: someone ended it, or the kernel's OOM killer).
FATAL = frozenset({"SIGABRT", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})
# torchrun's report of a failed rank: "exitcode  : -6 (pid: 27318)  (SIGABRT)"
RANK_EXIT = re.compile(r"^\s*exitcode\s*:\s*-(\d+)\b", re.M)


def crash_signal(code: int, output: str) -> str | None:
    """The fatal signal a launch's program died of: its own process's (a negative exit code), or a rank's as torchrun
    reports it in ``output``; None for any other end."""
    numbers = [-code] if code < 0 else [int(n) for n in RANK_EXIT.findall(output)]
    for n in numbers:
        try:
            name = signal.Signals(n).name
        except ValueError:
            continue
        if name in FATAL:
            return name
    return None


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
    from nsightflow.capture.launch.backend import found

    if not found(binary):
        raise ToolError(f"{binary!r} not found on PATH: install it or set its path under `tools:` in the config")


def note(log: str | Path, text: str) -> None:
    """A line for the terminal and the job's log."""
    print(f"[nsightflow] {text}", file=sys.stderr, flush=True)
    with open(log, "a") as fh:
        fh.write(f"\n[nsightflow] {text}\n")


def append_log(log: str | Path, argv: list[str], text: str) -> None:
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n" + text)


class LiveLog:
    """A tool's output written to its log line by line as it runs (``tail -f`` shows a long ncu launch's progress,
    and a job killed from outside leaves what its tool said), up to the start the job keeps of a long output
    (nsightflow.capture.launch.children.Output); the rest of what it keeps (the end, what was left out) follows when
    the tool ends. A write that fails (a full disk) stops the stream; the output is then appended whole at the end
    (:func:`_end_log`)."""

    def __init__(self, log: str | Path, argv: list[str]) -> None:
        self.lock = threading.Lock()
        self.ok = True
        self.fh: Any = None
        self.streamed: list[str] = []
        self.room = children.LIMIT_BYTES // 2  # the start of an output the job keeps (Output's head)
        try:
            self.fh = open(log, "a")  # held while the tool runs, closed by end()
            self.fh.write("$ " + " ".join(argv) + "\n")
            self.fh.flush()
        except OSError:
            self.ok = False

    def follow(self, on_line: Callable[[str], None] | None) -> Callable[[str], None]:
        def seen(line: str) -> None:
            with self.lock:
                if self.ok and self.room >= len(line):
                    try:
                        self.fh.write(line)
                        self.fh.flush()
                        self.streamed.append(line)
                        self.room -= len(line)
                    except OSError:
                        self.ok = False
                else:
                    self.room = -1  # the stream stops at the first line past it: what it wrote starts the output
            if on_line is not None:
                on_line(line)

        return seen

    def end(self, output: str, text: str) -> bool:
        """Write what ``output`` (the output as the job keeps it) has beyond what was streamed, then ``text``, and
        close; whether the whole output is in the log."""
        with self.lock:
            done, self.ok = self.ok, False
            streamed = "".join(self.streamed)
            rest = output[len(streamed) :] if output.startswith(streamed) else output
            if self.fh is not None:
                try:
                    if done:
                        self.fh.write(rest + text)
                    self.fh.close()
                except OSError:
                    done = False
            return done


def _end_log(log: str | Path, argv: list[str], live: LiveLog | None, output: str, text: str) -> None:
    """End a tool's log: after the output streamed (``live``), what it lacks of ``output`` and ``text``; else the
    whole block."""
    if live is None or not live.end(output, text):
        append_log(log, argv, output + text)


def timeline(
    nsys_bin: str, call: HarnessCall, rep: str | Path, sqlite_out: str | Path, out: ProfileOutputs, run: RunSettings
) -> None:
    """A callable's timeline: nsys profile → ``rep`` (.nsys-rep) and its SQLite export, the analytic count and the
    measured ceilings from the same launch, and the run's manifest. The harness times every step first with nothing
    traced (``timed``), then opens nsys's capture range for the ranged and probe passes."""
    rep = Path(rep)
    tmp_base = rep.with_name(rep.stem + ".tmp")
    harness_json = Path(str(out.manifest) + ".harness.json")
    program = replace(call, timed=True, out=str(harness_json), flops_out=str(out.flops), ceilings_out=str(out.ceilings))
    argv = nsys.profile_argv(nsys_bin, tmp_base, program.argv(), capture_range="none")
    output, _ = run_tool(argv, out.log, run.timeout_s, gpu=True)
    publish_nsys(tmp_base, rep, sqlite_out, out.log)
    what = "Timeline (nsys), wall times, analytic count and ceilings in the same launch"
    commands = [{"what": what, "argv": argv}]
    write_manifest(harness_json, out.manifest, run.versions, commands, run.settings, tool_warnings(output))
    harness_json.unlink()


def publish_nsys(tmp_base: Path, rep: Path, sqlite_out: str | Path, log: str | Path) -> None:
    """Publish the .nsys-rep and SQLite export nsys wrote at ``tmp_base``, or say what is missing."""
    produced = Path(str(tmp_base) + ".nsys-rep")
    if not produced.exists():
        raise ToolError(f"nsys wrote no .nsys-rep at {produced}: {nsys_missing_why(tmp_base)}; log: {log}")
    exported = Path(str(tmp_base) + ".sqlite")
    if not exported.exists():
        raise ToolError(f"nsys wrote no SQLite export beside {produced.name} (--export=sqlite); log: {log}")
    files.publish(exported, Path(sqlite_out))
    files.publish(produced, rep)


def nsys_missing_why(tmp_base: Path) -> str:
    """Why nsys left no report where it was told, from what it did leave: a raw ``.qdstrm`` its importer did not turn
    into a report (the importer's libraries, libdw.so.1 among them), or nothing at all."""
    raw = Path(str(tmp_base) + ".qdstrm")
    if raw.exists():
        return (
            f"it left only the raw capture {raw.name}, which its importer (QdstrmImporter) did not convert: run "
            f"QdstrmImporter -i {raw} to see why (a missing library such as libdw.so.1 is the usual cause)"
        )
    return "it left nothing there either (the program ended before nsys started tracing, or nsys failed: see the log)"


def tool_warnings(output: str) -> list[str]:
    """Warning lines a profiler or the workload printed (kept for the report's diagnostics)."""
    return [ln.strip() for ln in output.splitlines() if "warning" in ln.lower()][:50]


def write_manifest(
    harness_json: str | Path,
    manifest: str | Path,
    versions: dict[str, Any],
    commands: list[dict[str, Any]],
    settings: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> Manifest:
    """The run's manifest: the harness's record (args, params, environment), the settings that shaped
    the run, tool versions, the host (GPU, driver) and the commands that ran."""
    from nsightflow.capture.launch.backend import host_info

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


def torch_profile(call: HarnessCall, trace: str | Path, out: ProfileOutputs, run: RunSettings) -> None:
    """A callable under torch.profiler → Chrome trace ``trace``; the analytic count and the measured ceilings ride on
    the same program launch; and the run's manifest."""
    harness_json = Path(str(out.manifest) + ".harness.json")
    program = replace(call, mode="torch", trace=str(trace), out=str(harness_json))
    argv = replace(program, flops_out=str(out.flops), ceilings_out=str(out.ceilings)).argv()
    output, _ = run_tool(argv, out.log, run.timeout_s, gpu=True)
    commands = [{"what": "torch.profiler run (harness)", "argv": argv}]
    write_manifest(harness_json, out.manifest, run.versions, commands, run.settings, tool_warnings(output))
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
