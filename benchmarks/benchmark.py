"""Benchmark on the GPU host: command-to-report time of the workflow against the program alone and against
ncu over every kernel of the ranged stages with the same metrics, all measured in this one run.

Usage: python3 benchmarks/benchmark.py [variant ...]. Variants:
  program     the workload alone (`python -m nsightflow.capture.inside.harness`, warm-up and ranged pass), default
  decoder default     `snakemake --cores 1 results/report.html` in a fresh copy (cold: no preflight, no ceilings cached)
  deep        the same with the decoder at n_layers 16
  program16   the 16-layer workload alone
  everything  ncu over every kernel of prefill and all decode steps, one program launch, with the metrics the
              default run's capture collected (its capture.cmd.json): run 'default' first
  program_long, long, everything_long  the same three for the decoder at n_layers 8, decode_steps 32
  full, everything_full  'default' and 'everything' with all five tensor precisions and the SASS FLOP counts
  program_8b, 8b  the decoder at Llama-3-8B's shape (EIGHT_B) alone and through the workflow
  idle_8b     the 8B-shaped program under ncu and nsys, nothing collected, flag by flag, phases timed
  everything_8b  ncu over every launch of its prefill and first decode step, extrapolated to all 32 steps
  train1, train4  the workflow on a training step (TRAIN) of 1 and of 4 iterations
  ncu_parts   where the ncu capture's time goes: the default plan's launches under growing metric sets
  timeline_parts  where the timeline job's time goes: the program, with the count and ceilings, under nsys
  phases      the program's phases (import, warm-up, ranged, probe, ceilings) and the preflight's parts
  passes      replay passes of subsets of the default metrics (one empty kernel)
  windows     what a profiler window (cudaProfilerStart/Stop pair) and the first profiled launch of a kernel
              cost under ncu, with the default metrics (one program launch, each part timed inside it)
Prints a table (seconds, × program alone, launches profiled) and each workflow's per-job seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import copy_workflow  # noqa: E402

from nsightflow import ncu_metrics  # noqa: E402
from nsightflow.capture.launch import ncu  # noqa: E402
from nsightflow.capture.read import ncu_csv  # noqa: E402


def _program(args: dict, runs: int = 3) -> tuple[float, int]:
    """The workload alone: the median of ``runs`` launches (the first launch on a fresh machine is slower)."""
    times = []
    for _ in range(runs):
        start = time.time()
        subprocess.run(
            [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(args)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.time() - start)
    print(f"  program runs (s): {[round(t, 1) for t in times]}", flush=True)
    return sorted(times)[len(times) // 2], 0


def run_snakemake(wf: Path, target: str, env: dict | None = None) -> None:
    argv = [sys.executable, "-m", "snakemake", "--cores", "1", target]
    subprocess.run(argv, cwd=wf, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def workflow_copy(dest: Path, change) -> Path:
    """A copy of the workflow in ``dest``, its config changed in place by ``change(cfg)``."""
    wf = copy_workflow(dest)
    path = wf / "config" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    change(cfg)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return wf


def _workflow(args: dict, key: str, ncu_cfg: dict | None = None) -> tuple[float, int, dict]:
    """The workflow, cold, in a fresh copy; ``ncu_cfg`` overrides config keys under ``ncu``. The metrics its
    capture collected are kept under ``key`` for the 'everything' variant that compares with it."""
    with tempfile.TemporaryDirectory() as tmp:

        def change(cfg: dict) -> None:
            cfg["workloads"][0]["args"].update(args)
            cfg["ncu"].update(ncu_cfg or {})

        wf = workflow_copy(Path(tmp), change)
        start = time.time()
        run_snakemake(wf, "results/report.html")
        seconds = time.time() - start
        keep = os.environ.get("OUT")
        if keep:  # the jobs' logs come back from the GPU host
            shutil.copytree(wf / "results" / "tinyllm" / "logs", Path(keep) / f"logs_{key}", dirs_exist_ok=True)
        rep = wf / "results" / "tinyllm" / "ncu" / "capture.ncu-rep"
        start = time.time()
        subprocess.run(ncu_csv.export_argv(shutil.which("ncu"), rep), check=True, capture_output=True)
        print(f"  of the ncu capture job: the CSV export alone {time.time() - start:.2f} s", flush=True)
        plan = json.loads((wf / "results" / "tinyllm" / "plan.json").read_text())
        cmd = json.loads((wf / "results" / "tinyllm" / "ncu" / "capture.cmd.json").read_text())
        COLLECTED[key] = {k: cmd.get(k) for k in ("tensor_precisions", "non_tensor_flops")}
        return seconds, len(plan["expected"]), _jobs(wf)


def _jobs(wf: Path) -> dict:
    """Seconds per rule, from Snakemake's log: each job's block (its start's timestamp, its rule and job id) against
    the timestamp of its "Finished jobid" line, so jobs that run at once (the counter check beside the timeline)
    are each timed whole. One-second resolution."""
    log = sorted((wf / ".snakemake" / "log").glob("*.log"))[-1].read_text().splitlines()
    out: dict[str, float] = {}
    started: dict[str, tuple[str, float]] = {}
    stamp = rule = None
    for line in log:
        if line.startswith("[") and line.endswith("]"):
            stamp = time.mktime(time.strptime(line[1:-1], "%a %b %d %H:%M:%S %Y"))
        elif line.strip().startswith(("rule ", "localrule ")) and line.strip().endswith(":"):
            rule = line.strip().split()[1].rstrip(":")
        elif line.strip().startswith("jobid: ") and rule is not None and stamp is not None:
            started[line.strip().split()[1]] = (rule, stamp)
            rule = None
        elif line.startswith("Finished jobid: ") and stamp is not None:
            job = line.split()[2]
            if job in started:
                name, began = started.pop(job)
                out[name] = out.get(name, 0) + stamp - began
    return out


COLLECTED = {}  # per workflow variant: the metrics its capture collected (from its capture.cmd.json)


def _everything(args: dict, key: str) -> tuple[float, int]:
    if key not in COLLECTED:
        raise SystemExit(f"an 'everything' variant compares with the metrics of workflow variant {key!r}: run it first")
    precisions = COLLECTED[key]["tensor_precisions"] or ncu_metrics.ALL_PRECISIONS
    non_tensor = COLLECTED[key]["non_tensor_flops"] is not False
    print(f"  the {key} run's metrics: tensor precisions {precisions}, non-tensor FLOPs {non_tensor}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "all"
        metrics = ncu_metrics.resolve_metrics("default", [], precisions, non_tensor=non_tensor)
        program = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(args)]
        argv = ncu.reference_argv(shutil.which("ncu"), base, "nsightflow", ["prefill", "decode"], metrics, program)
        start = time.time()
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
        return time.time() - start, ncu.profiled_count(out)


def _passes() -> tuple[float, int]:
    """Replay passes ncu needs for subsets of the default metrics (one empty kernel, so passes, not work)."""
    from nsightflow.capture.launch.preflight import probe_argv
    from nsightflow.ncu_metrics import BYTE_METRICS, PEAK_METRICS, SASS_FLOP_METRICS, TENSOR_FLOP_METRICS, TIME_METRICS

    sass = [m for pairs in SASS_FLOP_METRICS.values() for m, _ in pairs]
    sets = {
        "default": ncu_metrics.DEFAULT_METRICS,
        "no SASS": [m for m in ncu_metrics.DEFAULT_METRICS if m not in sass],
        "no L1/L2 bytes": [m for m in ncu_metrics.DEFAULT_METRICS if m not in (BYTE_METRICS["l1"], BYTE_METRICS["l2"])],
        "time+tensor+dram+peaks": list(TIME_METRICS.values())
        + list(TENSOR_FLOP_METRICS.values())
        + [BYTE_METRICS["dram_read"], BYTE_METRICS["dram_write"]]
        + list(PEAK_METRICS.values()),
        "SASS only": sass,
        "tensor only": list(TENSOR_FLOP_METRICS.values()),
        "L1/L2 bytes only": [BYTE_METRICS["l1"], BYTE_METRICS["l2"]],
    }
    one = [m for m in ncu_metrics.DEFAULT_METRICS if m not in TENSOR_FLOP_METRICS.values() or "bf16" in m]
    sets["bf16 tensor only, rest default"] = one
    start = time.time()
    for name, metrics in sets.items():
        proc = subprocess.run(
            probe_argv(shutil.which("ncu"), sys.executable, ",".join(metrics)),
            capture_output=True,
            text=True,
        )
        out = proc.stdout + proc.stderr
        passes = [ln.rsplit("-", 1)[-1].strip() for ln in out.splitlines() if ln.startswith("==PROF== Profiling")]
        errors = [ln for ln in out.splitlines() if "ERROR" in ln][:2]
        print(f"  metric set {name!r} ({len(metrics)} metrics): {passes or errors}", flush=True)
    return time.time() - start, 0


def _no_export(argv: list[str]) -> list[str]:
    """An ``nsys profile`` command line without its SQLite export (to time the export apart)."""
    return [a for a in argv if a != "--export=sqlite"]


def _timeline_parts() -> tuple[float, int]:
    """Where the timeline job's time goes: the program alone, with the analytic count and ceilings it adds,
    under nsys without and with the SQLite export (one launch each)."""
    from nsightflow.capture.launch import nsys

    base = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", "{}"]
    total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--flops-out", f"{tmp}/f.json", "--ceilings-out", f"{tmp}/c.json"]
        nsys_bin = shutil.which("nsys")
        variants = {
            "program": base,
            "program + flops + ceilings": base + extra,
            "nsys, no export": _no_export(nsys.profile_argv(nsys_bin, f"{tmp}/a", base + extra)),
            "nsys + sqlite export": nsys.profile_argv(nsys_bin, f"{tmp}/b", base + extra),
        }
        for name, argv in variants.items():
            start = time.time()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            took = time.time() - start
            total += took
            print(f"  {name}: {took:.1f} s", flush=True)
    return total, 0


def _ncu_parts() -> tuple[float, int]:
    """Where the ncu capture's time goes, on the default run's plan: the program under ncu with nothing
    profiled, then the planned launches with growing metric sets (one program launch each)."""
    from nsightflow.capture.read.plan import CapturePlan

    total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp))
        run_snakemake(wf, "results/tinyllm/plan.json")
        plan_json = wf / "results" / "tinyllm" / "plan.json"
        n = len(CapturePlan.read(plan_json).expected)
        program = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", "{}"]
        bf16 = ncu_metrics.resolve_metrics("default", [], ["bf16"])
        no_sass = [m for m in bf16 if "__sass_" not in m]
        variants = {
            "program alone": (program, None),
            "under ncu, nothing profiled": (program, ["gpu__time_duration.sum"]),
            "planned launches, default (bf16) without SASS": (program + ["--windows", str(plan_json)], no_sass),
            "planned launches, default (bf16), FP32 SASS only": (
                program + ["--windows", str(plan_json)],
                [m for m in bf16 if "__sass_" not in m or "_op_f" in m],
            ),
            "planned launches, default (bf16), one SASS metric (ffma)": (
                program + ["--windows", str(plan_json)],
                [m for m in bf16 if "__sass_" not in m or "_op_ffma" in m],
            ),
            "planned launches, default (bf16)": (program + ["--windows", str(plan_json)], bf16),
        }
        for name, (prog, metrics) in variants.items():
            argv = prog
            if metrics is not None:
                argv = ncu.capture_argv(
                    shutil.which("ncu"),
                    f"{tmp}/r",
                    prog,
                    metrics=metrics,
                    replay_mode="kernel",
                    clock_control="none",
                    cache_control="all",
                )
            start = time.time()
            subprocess.run(argv, check=True, cwd=wf, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            took = time.time() - start
            total += took
            print(f"  {name}: {took:.1f} s", flush=True)
    return total, n


WINDOWS = r"""
import json, time
import torch
import torch.cuda.profiler as prof
N = 20
x = {d: torch.rand(1 << 16, device="cuda", dtype=d) for d in (torch.float32, torch.bfloat16, torch.float16)}
ops = [torch.exp, torch.log, torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.relu, torch.abs, torch.neg,
       torch.sqrt, torch.rsqrt, torch.erf, torch.exp2, torch.log2, torch.log1p, torch.expm1, torch.ceil,
       torch.floor, torch.reciprocal, torch.square][:N]
for t in x.values():  # every kernel loaded and run once before any window (as the harness's warm-up does)
    for op in ops:
        op(t)
torch.cuda.synchronize()

def timed(fn):
    torch.cuda.synchronize()
    start = time.time()
    fn()
    torch.cuda.synchronize()
    return time.time() - start

def one_window(launches):
    prof.start()
    for launch in launches:
        launch()
    torch.cuda.synchronize()
    prof.stop()

def own_windows(launches):
    for launch in launches:
        prof.start()
        launch()
        torch.cuda.synchronize()
        prof.stop()

same = [lambda: torch.exp(x[torch.float32])] * N
# The first row that profiles anything also pays ncu's one-off start in this process (about 1 s on the H200).
rows = {
    "N empty windows": timed(lambda: own_windows([lambda: None] * N)),
    "N launches of one kernel, one window": timed(lambda: one_window(same)),
    "N launches of one kernel, a window each": timed(lambda: own_windows(same)),
    "N distinct kernels (first profiled launch each), one window": timed(
        lambda: one_window([lambda op=op: op(x[torch.bfloat16]) for op in ops])),
    "N distinct kernels (first profiled launch each), a window each": timed(
        lambda: own_windows([lambda op=op: op(x[torch.float16]) for op in ops])),
}
print(json.dumps({"N": N, **rows}))
"""


def _windows() -> tuple[float, int]:
    """Per window and per first profiled launch: one program under ncu (--profile-from-start off, the default
    metrics), the parts timed inside it; so the plan's windows can be shaped by what they cost."""
    metrics = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    with tempfile.TemporaryDirectory() as tmp:
        argv = ncu.capture_argv(
            shutil.which("ncu"),
            f"{tmp}/w",
            [sys.executable, "-c", WINDOWS],
            metrics=metrics,
            replay_mode="kernel",
            clock_control="none",
            cache_control="all",
        )
        start = time.time()
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        took = time.time() - start
    got = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    n = got.pop("N")
    for name, s in got.items():
        print(f"  {name.replace('N ', f'{n} ')}: {s:.2f} s ({1000 * s / n:.0f} ms each)", flush=True)
    return took, 4 * n


PHASES = r"""
import json, sys, time
t0 = time.time()
import torch
t1 = time.time()
from nsightflow.capture.inside import passes
from nsightflow.workloads import build_workload
from nsightflow.capture.inside.ceilings import measure
from nsightflow.precisions import matmul_precision
t2 = time.time()
w = build_workload("nsightflow.workloads.decoder:build", {})
torch.cuda.synchronize()
t3 = time.time()
passes._run_pass(w, None)
t4 = time.time()
passes._run_pass(w, passes._nvtx_ranges("nsightflow"))
t5 = time.time()
counts = passes.probe_pass(w, "nsightflow", count=True)
t6 = time.time()
m = matmul_precision(w.dtype, counts["stages"])
measure("cuda", m.dtype)
t7 = time.time()
print(json.dumps({"import torch": t1 - t0, "import nsightflow": t2 - t1, "build + CUDA init": t3 - t2,
                  "warm-up pass": t4 - t3, "ranged pass": t5 - t4, "probe pass (count, NVTX)": t6 - t5,
                  "ceilings": t7 - t6}))
"""


def _phases() -> tuple[float, int]:
    """Where the program's time goes (one process, each phase timed), and the preflight's parts."""
    from nsightflow.capture.launch.preflight import probe_argv

    total = 0.0
    steps = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "nvidia-smi -L": ["nvidia-smi", "-L"],
        "nsys --version": [shutil.which("nsys"), "--version"],
        "ncu --version": [shutil.which("ncu"), "--version"],
        "ncu on the preflight probe": probe_argv(shutil.which("ncu"), sys.executable),
        "the program, phases": [sys.executable, "-c", PHASES],
    }
    for name, argv in steps.items():
        start = time.time()
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        took = time.time() - start
        total += took
        print(f"  {name}: {took:.2f} s", flush=True)
        if name == "the program, phases":
            for phase, s in json.loads(out.strip().splitlines()[-1]).items():
                print(f"    {phase}: {s:.2f} s", flush=True)
    return total, 0


def _workflow_of(workloads: list[dict], key: str, after=None) -> tuple[float, int, dict]:
    """The workflow, cold, over ``workloads`` (config entries); launches profiled summed over their runs.
    ``after(wf)``: more measurements in the finished run's copy."""
    with tempfile.TemporaryDirectory() as tmp:
        wf = workflow_copy(Path(tmp), lambda cfg: cfg.update(workloads=workloads))
        start = time.time()
        run_snakemake(wf, "results/report.html", {**os.environ, "PYTHONPATH": str(wf / "tests")})  # tests' workloads
        seconds = time.time() - start
        keep = os.environ.get("OUT")
        n = 0
        for w in workloads:
            plan = json.loads((wf / "results" / w["name"] / "plan.json").read_text())
            n += len(plan["expected"])
            if w["name"] == "8b":
                LAUNCHES[key] = sum(s["launches"] for s in plan["stages"].values())
            if keep:
                shutil.copytree(wf / "results" / w["name"] / "logs", Path(keep) / f"logs_{key}", dirs_exist_ok=True)
            for log in sorted((wf / "results" / w["name"] / "logs").glob("*.log")):
                took = [ln for ln in log.read_text().splitlines() if ln.startswith("[nsightflow] the job took")]
                print(f"  {w['name']} {log.stem}: {took[-1][13:] if took else '?'}", flush=True)
        if keep and os.environ.get("NSIGHTFLOW_KEEP_RUN"):  # the run's files but its reports, to study the jobs after
            subprocess.run(
                ["tar", "cJf", f"{keep}/run_{key}.tar.xz", "--exclude=*.nsys-rep", "--exclude=*.ncu-rep", "results"],
                cwd=wf,
                check=True,
            )
        jobs = _jobs(wf)
        _gantt(wf, start, start + seconds)
        if after is not None:
            after(wf)
        return seconds, n, jobs


EPOCHS = re.compile(
    r"the job took ([0-9.]+) s \(([0-9.]+) s since its interpreter started; epoch ([0-9.]+) to ([0-9.]+)\)"
)


def _gantt(wf: Path, began: float, ended: float) -> None:
    """Each job on the workflow's clock (its log's epochs: from its interpreter's start to its end, 10 ms resolution),
    and the time no job ran: Snakemake's start, its work between jobs, its end."""
    spans = []
    for log in sorted((wf / "results").rglob("*.log")):
        found = EPOCHS.findall(log.read_text())
        if found:
            body, since, t0, t1 = map(float, found[-1])
            spans.append((t0, t1, since - body, log.relative_to(wf / "results").as_posix()))
    spans.sort()
    print(f"  {'job':40} {'start':>7} {'end':>7} {'imports':>8}", flush=True)
    idle, cursor = 0.0, began
    for t0, t1, imports, name in spans:
        idle += max(0.0, t0 - cursor)
        cursor = max(cursor, t1)
        print(f"  {name:40} {t0 - began:7.2f} {t1 - began:7.2f} {imports:8.2f}", flush=True)
    idle += max(0.0, ended - cursor)
    first = spans[0][0] - began if spans else float("nan")
    print(
        f"  no job running: {idle:.2f} s of {ended - began:.2f} s (Snakemake's start {first:.2f} s, its end "
        f"{ended - cursor:.2f} s)",
        flush=True,
    )


# examples/nvtx_program.py as the GPU tier runs it: a command with its own NVTX ranges, and its twin callable.
NVTX_PROGRAM = {"batch": 4, "prompt": 256, "hidden": 1024, "layers": 4, "steps": 4}
NVTX_COMMAND = {
    "name": "nvtx_command",
    "command": [sys.executable, "examples/nvtx_program.py"] + [f"--{k}={v}" for k, v in NVTX_PROGRAM.items()],
    "domain": "LLM",
}
NVTX_CALLABLE = {"name": "nvtx_callable", "callable": "workloads:nvtx_program", "args": NVTX_PROGRAM}


def _command_pair(rounds: int = 4) -> tuple[float, int]:
    """The command workload's workflow against the same program as a callable, cold, alternating ``rounds`` times
    (machines drift: pairs run back to back; which of the two runs first alternates too, so that neither always meets
    a colder machine); the median of the pairs' ratios."""
    ratios = []
    for i in range(rounds):
        if i % 2 == 0:
            cmd = _workflow_of([NVTX_COMMAND], "command")[0]
            twin = _workflow_of([NVTX_CALLABLE], "callable")[0]
        else:
            twin = _workflow_of([NVTX_CALLABLE], "callable")[0]
            cmd = _workflow_of([NVTX_COMMAND], "command")[0]
        ratios.append(cmd / twin)
        print(f"  pair {i + 1}: command {cmd:.1f} s, callable {twin:.1f} s: {cmd / twin:.2f}x", flush=True)
    print(f"  command / callable, median of {rounds} pairs: {statistics.median(ratios):.2f}x", flush=True)
    return statistics.median(ratios), 0


LAUNCHES = {}  # per workflow variant: the launches of its stages in the timeline


def _parts_8b(wf: Path) -> None:
    """In a finished 8B run: what Snakemake's own start costs (a dry run, an up-to-date run); the run's timeline
    launch again as captured and with nsys flags changed; its ncu capture again as captured, with no warm-up pass and
    without the NCCL name filter, each timed and checked against the plan (the check the capture job makes)."""
    for what, extra in (("dry run", ["-n"]), ("up-to-date run", [])):
        start = time.time()
        argv = [sys.executable, "-m", "snakemake", "--cores", "1", *extra, "results/report.html"]
        subprocess.run(argv, cwd=wf, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"  snakemake, {what}: {time.time() - start:.1f} s", flush=True)
    run = wf / "results" / "8b"
    timeline = json.loads((run / "manifest.json").read_text())["commands"][0]["argv"]
    out = timeline[timeline.index("-o") + 1]
    timeline = [str(wf / "parts") if a == out else a for a in timeline]
    for name, argv in {
        "as captured": timeline,
        "no --cuda-graph-trace=node": [a for a in timeline if a != "--cuda-graph-trace=node"],
        "--capture-range-end=none": [
            "--capture-range-end=none" if a == "--capture-range-end=stop" else a for a in timeline
        ],
    }.items():
        _timed_launch(f"timeline, {name}", argv, wf)
    captured = json.loads((run / "ncu" / "capture.cmd.json").read_text())["argv"]
    out = captured[captured.index("--export") + 1]
    captured = [str(wf / "parts") if a == out else a for a in captured]
    warm = captured.index("--warmup") + 1
    cold = captured[:warm] + ["0"] + captured[warm + 1 :]
    name_filter = cold.index("--kernel-name")
    for name, argv in {
        "as captured": captured,
        "no warm-up pass": cold,
        "no warm-up pass, no NCCL name filter": cold[:name_filter] + cold[name_filter + 2 :],
    }.items():
        _timed_launch(f"ncu capture, {name}", argv, wf)
        _check_against_plan(wf / "parts.ncu-rep", run / "plan.json")


def _timed_launch(label: str, argv: list[str], cwd: Path) -> None:
    """Run a profiler's launch; print its seconds, the harness's phases and what the profiler took after it."""
    start = time.time()
    got = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    end = time.time()
    phases = [ln.split("nsightflow: ", 1)[1] for ln in got.splitlines() if ln.startswith("nsightflow: ")]
    ends = [float(p.rsplit(" ", 1)[1]) for p in phases if p.startswith("the harness ends at")]
    after = f", {end - ends[-1]:.1f} s after the harness ended" if ends else ""
    print(f"  {label}: {end - start:.1f} s{after}\n    {'; '.join(phases)}", flush=True)


def _check_against_plan(rep: Path, plan_json: Path) -> None:
    """The capture job's check of a report against its plan, and the CSV export's seconds."""
    from nsightflow.capture.read import ncu_csv
    from nsightflow.capture.read.matching import match_to_plan
    from nsightflow.capture.read.plan import CapturePlan, expected_frame

    start = time.time()
    text = subprocess.run(ncu_csv.export_argv(shutil.which("ncu"), rep), capture_output=True, text=True).stdout
    exported = time.time() - start
    try:
        raw, _ = ncu_csv.parse_raw_csv(text, rep.name)
        match_to_plan(ncu_csv.result_metrics(raw), expected_frame(CapturePlan.read(plan_json)), rep.name)
        verdict = f"{len(raw)} results, the plan's launches"
    except Exception as exc:  # the experiment reports, it does not stop the benchmark
        verdict = f"does not match the plan: {str(exc)[:300]}"
    print(f"    export {exported:.1f} s: {verdict}", flush=True)


# Llama-3-8B's shape in the built-in decoder (multi-head attention: 32 heads of 128), bf16 random weights; batch 1,
# a 512-token prompt and 32 decode steps, eager: a launch-bound decode of about 450 launches a step.
EIGHT_B = {
    "batch": 1,
    "prompt": 512,
    "decode_steps": 32,
    "d_model": 4096,
    "n_layers": 32,
    "n_heads": 32,
    "d_ff": 14336,
    "vocab": 128256,
}


def _everything_8b() -> tuple[float, int]:
    """ncu over every launch of prefill and the first decode step of the 8B shape (decode_steps 1), with the metrics
    the workflow collected; the cost of all 32 steps extrapolated from the per-launch cost measured here (the program
    under ncu with nothing profiled, in the same call): about 30,000 launches would take most of an hour."""
    if "8b" not in LAUNCHES:
        raise SystemExit("everything_8b extrapolates to the launches of the '8b' run: run it first")
    args = {**EIGHT_B, "decode_steps": 1}
    metrics = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    program = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(args)]
    with tempfile.TemporaryDirectory() as tmp:
        idle = ncu.capture_argv(
            shutil.which("ncu"),
            f"{tmp}/idle",
            program,
            metrics=["gpu__time_duration.sum"],
            replay_mode="kernel",
            clock_control="none",
            cache_control="all",
        )
        start = time.time()
        subprocess.run(idle, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        base = time.time() - start
        stages = ["prefill", "decode"]
        argv = ncu.reference_argv(shutil.which("ncu"), f"{tmp}/all", "nsightflow", stages, metrics, program)
        start = time.time()
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
        took = time.time() - start
    n = ncu.profiled_count(out)
    per = (took - base) / n
    total = LAUNCHES["8b"]
    print(
        f"  prefill + 1 decode step: {n} launches in {took:.1f} s; the program under ncu, nothing profiled, "
        f"{base:.1f} s; so {per * 1e3:.1f} ms a launch; {total} launches of prefill and 32 decode steps "
        f"extrapolated: {base + per * total:.0f} s (measured, not extrapolated: {took:.1f} s for {n})",
        flush=True,
    )
    return base + per * total, total


def _idle_8b() -> tuple[float, int]:
    """The 8B-shaped program under each profiler with nothing collected, flag by flag (the harness prints each
    phase's seconds): what the program launches under ncu and nsys cost before any profiling."""
    from nsightflow.capture.launch import nsys
    from nsightflow.capture.read.comm import NCU_FILTER

    program = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(EIGHT_B)]
    total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        ncu_bin, nsys_bin = shutil.which("ncu"), shutil.which("nsys")
        base = [ncu_bin, "--force-overwrite", "--export", f"{tmp}/i", "--profile-from-start", "off"]
        base += ["--clock-control=none", "--metrics", "gpu__time_duration.sum"]
        timeline = program + ["--timed", "--flops-out", f"{tmp}/f.json", "--ceilings-out", f"{tmp}/c.json"]
        variants = {
            "program alone": program,
            "ncu --nvtx + NCCL filter (as captured)": base + ["--nvtx", *NCU_FILTER] + program,
            "ncu --nvtx": base + ["--nvtx"] + program,
            "ncu, NCCL filter": base + NCU_FILTER + program,
            "ncu, neither": base + program,
            "timeline program alone": timeline,
            "nsys + sqlite export (as captured)": nsys.profile_argv(
                nsys_bin, f"{tmp}/a", timeline, capture_range="none"
            ),
            "nsys, no export": _no_export(nsys.profile_argv(nsys_bin, f"{tmp}/b", timeline, capture_range="none")),
            "nsys export of that": [
                nsys_bin,
                "export",
                "--type",
                "sqlite",
                "--force-overwrite",
                "true",
                "-o",
                f"{tmp}/b.sqlite",
                f"{tmp}/b.nsys-rep",
            ],
        }
        for name, argv in variants.items():
            start = time.time()
            out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
            took = time.time() - start
            total += took
            phases = [ln.split("nsightflow: ", 1)[1] for ln in out.splitlines() if "nsightflow: " in ln]
            print(f"  {name}: {took:.1f} s; {'; '.join(phases)}", flush=True)
    return total, 0


TRAIN = {"batch": 4, "seq": 256, "n_layers": 2, "optimizer": "adamw_fused"}

# The richer metrics of earlier defaults: all five tensor precisions and the SASS (non-tensor) FLOP counts.
FULL = {"tensor_precisions": "all", "non_tensor_flops": True}

# A longer run of the same decoder: twice the layers, four times the decode steps (about 9,000 launches).
LONG = {"n_layers": 8, "decode_steps": 32}

VARIANTS = {
    "phases": _phases,
    "ncu_parts": _ncu_parts,
    "timeline_parts": _timeline_parts,
    "passes": _passes,
    "windows": _windows,
    "program": lambda: _program({}),
    "default": lambda: _workflow({}, "default"),
    "deep": lambda: _workflow({"n_layers": 16}, "deep"),
    "program16": lambda: _program({"n_layers": 16}),
    "everything": lambda: _everything({}, "default"),
    "program_long": lambda: _program(LONG),
    "long": lambda: _workflow(LONG, "long"),
    "everything_long": lambda: _everything(LONG, "long"),
    "full": lambda: _workflow({}, "full", FULL),
    "program_8b": lambda: _program(EIGHT_B),
    "8b": lambda: _workflow_of(
        [{"name": "8b", "callable": "nsightflow.workloads.decoder:build", "args": EIGHT_B}], "8b"
    ),
    "8b_parts": lambda: _workflow_of(
        [{"name": "8b", "callable": "nsightflow.workloads.decoder:build", "args": EIGHT_B}], "8b", _parts_8b
    ),
    "everything_8b": _everything_8b,
    "idle_8b": _idle_8b,
    "train1": lambda: _workflow_of(
        [{"name": "train", "callable": "nsightflow.workloads.training:build", "args": {**TRAIN, "iterations": 1}}],
        "train1",
    ),
    "train4": lambda: _workflow_of(
        [{"name": "train", "callable": "nsightflow.workloads.training:build", "args": {**TRAIN, "iterations": 4}}],
        "train4",
    ),
    "everything_full": lambda: _everything({}, "full"),
    "command_pair": _command_pair,
}

if __name__ == "__main__":
    names = sys.argv[1:] or list(VARIANTS)
    rows = {}
    for name in names:
        got = VARIANTS[name]()
        rows[name] = got
        print(f"{name}: {got[0]:.1f} s, {got[1]} launches profiled", flush=True)
        if len(got) > 2:
            print("  per job (s):", {k: round(v, 1) for k, v in got[2].items()}, flush=True)
    print(f"\n{'variant':16} {'seconds':>8} {'x program':>10} {'launches':>9}")
    for name, got in rows.items():
        base = "program_long" if name.endswith("_long") or name == "long" else "program"
        base = "program_8b" if "8b" in name else base
        alone = rows.get(base, (None,))[0]
        ratio = f"{got[0] / alone:10.1f}" if alone else f"{'':>10}"
        print(f"{name:16} {got[0]:8.1f} {ratio} {got[1]:9d}")
    if "default" in rows and "everything" in rows:
        print(f"\nncu over everything / default workflow: {rows['everything'][0] / rows['default'][0]:.1f}x")
    if "full" in rows and "everything_full" in rows:
        print(f"ncu over everything / workflow, {FULL}: {rows['everything_full'][0] / rows['full'][0]:.1f}x")
    if "long" in rows and "everything_long" in rows:
        print(f"ncu over everything / workflow, {LONG}: {rows['everything_long'][0] / rows['long'][0]:.1f}x")
    eight_b = rows.get("8b") or rows.get("8b_parts")
    if eight_b and "everything_8b" in rows:
        ratio = rows["everything_8b"][0] / eight_b[0]
        print(f"ncu over everything (extrapolated) / workflow, 8B shape: {ratio:.1f}x")
    if "train1" in rows and "train4" in rows:
        print(f"training, 4 iterations / 1 iteration (workflow): {rows['train4'][0] / rows['train1'][0]:.2f}x")
    if "default" in rows and "deep" in rows:
        print(f"16 layers / 4 layers (workflow): {rows['deep'][0] / rows['default'][0]:.2f}x")
