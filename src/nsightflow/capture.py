"""Run the profilers: argv lists only, logs kept, outputs atomic, empty captures diagnosed.

Each function is what one workflow rule does; all are usable from a notebook too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path


from nsightflow import ncu, nsys
from nsightflow.select import select_kernels


class ToolError(RuntimeError):
    """A profiler failed; the message names the command, the cause and the log."""


def harness_argv(spec: str, args: dict, domain: str, warmup: int, python: str | None = None) -> list[str]:
    """The program the profilers launch: the harness running the workload under NVTX."""
    return [python or sys.executable, "-m", "nsightflow.harness", "--callable", spec,
            "--args", json.dumps(args, sort_keys=True), "--domain", domain, "--warmup", str(warmup)]


def run_tool(argv: list[str], log: str | Path, timeout_s: float | None = None, check: bool = True,
             gpu: bool = False) -> tuple[str, int]:
    """Run ``argv`` (never through a shell), append its output to ``log``; return (output, exit code).

    With ``gpu`` the child runs on a device of its own (see nsightflow.gpus.claim). With ``check``
    a non-zero exit raises ToolError with the output's last lines.
    """
    from nsightflow.gpus import claim

    require(argv[0])
    with claim(n_devices=None if gpu else 0) as (env, decision):
        started = time.time()
        # Its own process group: on a timeout the profiler and the program it launched are stopped together.
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            _append(log, argv, (out or "") + f"\n[nsightflow] stopped after the {timeout_s} s timeout\n")
            raise ToolError(f"{argv[0]} did not finish within {timeout_s} s (config: timeout_s); log: {log}") from exc
    gpu_note = f"[nsightflow] {decision}; ran from {started:.3f} to {time.time():.3f}\n" if gpu else ""
    _append(log, argv, gpu_note + stdout + f"\n[nsightflow] exit code {proc.returncode}\n")
    if check and proc.returncode != 0:
        tail = "\n".join(stdout.strip().splitlines()[-10:])
        raise ToolError(f"{Path(argv[0]).name} exited with {proc.returncode}; log: {log}\n{tail}")
    return stdout, proc.returncode


def require(binary: str) -> None:
    """Raise ToolError naming the fix when ``binary`` is neither on PATH nor a file."""
    from nsightflow.backend import found

    if not found(binary):
        raise ToolError(f"{binary!r} not found on PATH: install it or set its path under `tools:` in the config")


def _append(log: str | Path, argv: list[str], text: str) -> None:
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n" + text)


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished output into place, so a killed run never leaves a complete-looking file."""
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)


def timeline(nsys_bin: str, program: list[str], rep: str | Path, log: str | Path, timeout_s: float | None) -> str:
    """nsys profile → ``rep`` (.nsys-rep); returns what nsys and the program printed."""
    rep = Path(rep)
    tmp_base = rep.with_name(rep.stem + ".tmp")
    out, _ = run_tool(nsys.profile_argv(nsys_bin, tmp_base, program), log, timeout_s, gpu=True)
    produced = Path(str(tmp_base) + ".nsys-rep")
    if not produced.exists():
        raise ToolError(f"nsys wrote no .nsys-rep (only a .qdstrm?): its importer may lack libdw.so.1; log: {log}")
    _publish(produced, rep)
    return out


def tool_warnings(output: str) -> list[str]:
    """Warning lines a profiler or the workload printed (kept for the report's diagnostics)."""
    return [ln.strip() for ln in output.splitlines() if "warning" in ln.lower()][:50]


def write_manifest(harness_json: str | Path, manifest: str | Path, versions: dict, commands: list[dict],
                   settings: dict | None = None, warnings: list[str] | None = None) -> dict:
    """The run's manifest: the harness's record (args, params, environment), the settings that shaped
    the run, tool versions, the host (GPU, driver) and the commands that ran."""
    from nsightflow.backend import host_info

    data = json.loads(Path(harness_json).read_text())
    env = data.get("environment", {})
    data["versions"] = {**versions, **{k: env.get(k) for k in ("torch", "cuda", "python", "device_name")}}
    data["settings"] = settings or {}
    data["host"] = host_info()
    data["commands"] = commands
    data["warnings"] = warnings or []
    tmp = Path(str(manifest) + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    _publish(tmp, Path(manifest))
    return data


def torch_profile(program: list[str], trace: str | Path, manifest: str | Path, log: str | Path,
                  versions: dict, settings: dict, timeout_s: float | None = None) -> None:
    """The workload under torch.profiler → Chrome trace ``trace``, and the run's manifest."""
    harness_json = Path(str(manifest) + ".harness.json")
    argv = list(program) + ["--mode", "torch", "--trace", str(trace), "--out", str(harness_json)]
    out, _ = run_tool(argv, log, timeout_s, gpu=True)
    write_manifest(harness_json, manifest, versions, [{"what": "torch.profiler run (harness)", "argv": argv}], settings,
                   tool_warnings(out))
    harness_json.unlink()


def stats(nsys_bin: str, rep: str | Path, out_dir: str | Path, sqlite_out: str | Path, log: str | Path) -> None:
    """nsys stats CSVs into ``out_dir`` (nvtx_sum.csv, ...) and the SQLite export to ``sqlite_out``."""
    rep, out_dir = Path(rep), Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
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


def check_ranges(stages, kernels, domain: str | None) -> None:
    """Fail before ncu runs when the timeline shows the stages' ranges missing, or empty of kernels."""
    seen = [f"{d}:{s}" for d, s in zip(stages["domain"], stages["stage"])] or ["none"]
    mine = stages[stages["domain"] == domain] if domain is not None else stages
    if mine.empty:
        raise ValueError(f"the timeline has no NVTX range in domain {domain!r}; ranges it saw (domain:name): "
                         f"{', '.join(seen)}. The harness annotates stages in config 'nvtx_domain'; a workload "
                         "that annotates its own ranges must use push/pop ranges (nvtx.annotate) in that domain.")
    idle = sorted(set(mine["stage"]) - set(kernels[kernels["domain"] == mine["domain"].iloc[0]]["stage"]))
    if idle:
        raise ValueError(f"no GPU kernels were launched inside the NVTX ranges of stage(s) {idle}: the work runs "
                         "outside the stage (in setup, on another thread, or on the CPU); ncu would profile nothing.")


def selection(stats_dir: str | Path, sqlite: str | Path, top_n: int | None, coverage: float | None,
              sample_steps: list, selected_csv: str | Path, plans_dir: str | Path,
              kernel_filter: bool = True, domain: str | None = None) -> list[ncu.CapturePlan]:
    """Pick kernels per stage and write one capture plan (JSON) per ncu run.

    With ``kernel_filter`` a capture takes only the selected kernels (an ncu alternation of
    their mangled names); without it, every launch of the sampled stage steps.
    """
    kernels = nsys.kernel_table(Path(stats_dir) / "nvtx_kern_sum.csv")
    stages = nsys.stage_table(Path(stats_dir) / "nvtx_sum.csv")
    check_ranges(stages, kernels, domain)
    selected = select_kernels(kernels, top_n, coverage)
    to_capture = selected if kernel_filter else select_kernels(kernels, None, 1.0)
    plans = ncu.plan_captures(nsys.launch_sequence(sqlite), to_capture, sample_steps)
    if not kernel_filter:
        for plan in plans:
            plan.kernels = []
    plans_dir = Path(plans_dir)
    tmp = plans_dir.with_name(plans_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for plan in plans:
        (tmp / f"{plan.capture_id}.json").write_text(json.dumps(asdict(plan), indent=1))
    selected.to_csv(Path(selected_csv), index=False)
    shutil.rmtree(plans_dir, ignore_errors=True)
    os.replace(tmp, plans_dir)
    return plans


def ncu_capture(ncu_bin: str, plan_json: str | Path, program: list[str], rep: str | Path, cmd_json: str | Path,
                log: str | Path, *,
                metrics: list[str], sections: list[str], replay_mode: str, clock_control: str,
                cache_control: str, timeout_s: float | None, stats_dir: str | Path | None = None,
                fallback: bool = False) -> None:
    """One targeted ncu run of a plan → ``rep`` (.ncu-rep); fails with a diagnosis when nothing, or
    less than planned, was profiled. With ``fallback`` a refused replay mode is retried with the next
    one (range → app-range → kernel); the record says which mode produced the numbers and why."""
    plan = json.loads(Path(plan_json).read_text())
    rep = Path(rep)
    tmp_base = rep.with_name(rep.name.removesuffix(".ncu-rep") + ".tmp")
    expr = ncu.nvtx_include(plan["domain"], plan["stage"])
    seen = []
    if stats_dir:
        st = nsys.stage_table(Path(stats_dir) / "nvtx_sum.csv")
        seen = [f"{d}:{s}" for d, s in zip(st["domain"], st["stage"])]
    tried: list[dict] = []
    mode = replay_mode
    while True:
        argv = ncu.capture_argv(ncu_bin, tmp_base, program, nvtx_expr=expr, kernels=plan["kernels"] or None,
                                launch_skip=plan["launch_skip"], launch_count=plan["launch_count"],
                                metrics=metrics, sections=sections, replay_mode=mode,
                                clock_control=clock_control, cache_control=cache_control)
        what = f"stage {plan['stage']!r} steps {plan['steps']} with --nvtx-include {expr!r} (replay mode {mode})"
        out, rc = run_tool(argv, log, timeout_s, check=False, gpu=True)
        try:
            ncu.check_capture(out, rc, what=what, ranges_seen=seen, domain=plan["domain"], stage=plan["stage"],
                              expected=plan["launch_count"] if mode in ("kernel", "application") else None)
            break
        except ncu.CaptureError as exc:
            if not (fallback and mode in ncu.FALLBACK):
                raise
            causes = [ln for ln in str(exc).splitlines() if ln.startswith(("cause:", "ncu said:"))]
            tried.append({"replay_mode": mode, "why": "; ".join(causes) or str(exc).splitlines()[0]})
            mode = ncu.FALLBACK[mode]
    produced = Path(str(tmp_base) + ".ncu-rep")
    if not produced.exists():
        raise ToolError(f"ncu wrote no report for {what}; log: {log}")
    record = {"argv": argv, "capture_id": plan["capture_id"], "replay_mode": mode, "fallback_from": tried,
              "warnings": ncu.warnings(out), "clock_control": clock_control}
    Path(cmd_json).write_text(json.dumps(record, indent=1))
    _publish(produced, rep)


def ncu_export(ncu_bin: str, rep: str | Path, csv_out: str | Path, log: str | Path) -> None:
    """``ncu --import --page raw --csv --print-units base`` → ``csv_out`` (checked to parse)."""
    argv = ncu.export_argv(ncu_bin, rep)
    require(ncu_bin)
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _append(log, argv, proc.stderr + f"\n[nsightflow] exit code {proc.returncode}\n")
    if proc.returncode != 0:
        raise ToolError(f"ncu --import failed with {proc.returncode}; log: {log}")
    ncu.parse_raw_csv(proc.stdout)  # raises on an empty or malformed export
    tmp = Path(str(csv_out) + ".tmp")
    tmp.write_text(proc.stdout)
    _publish(tmp, Path(csv_out))
