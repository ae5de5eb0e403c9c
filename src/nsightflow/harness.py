"""Run a workload the way Nsight needs it: warm-up, ranged pass, probe pass, in one program launch.

A workload is a :class:`Workload`: a ``setup`` that resets state (KV caches) and ordered stages, each
a function of its step index run ``repeats`` times per iteration, for ``iterations`` iterations
(a training loop: forward, backward, optimizer, again). A stage's step index counts every time it runs.

Passes of one launch:
1. warm-up, outside any range (CUDA context, cuBLAS handles, first-call autotuning);
2. the ranged pass: every stage step inside ``nvtx.annotate(stage, domain=..., payload=step)`` with
   ``torch.cuda.synchronize()`` before each range ends, so a range's wall time covers its kernels and
   every kernel launched in its time window (by any thread) belongs to it;
3. optionally the probe pass (nsightflow.probe): operators numbered and marked per step, FLOPs and
   bytes counted (the analytic count rides on this launch), or, under ncu, profiler windows opened
   around the units a capture plan names;
4. optionally the measured ceilings (nsightflow.ceilings) of the device, in the dtype of the workload's
   matrix work (the one the probe pass saw most GEMM FLOPs in, else the declared one).

Users plug in their own model as a callable ``package.module:function`` that takes keyword arguments
and returns a :class:`Workload`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsightflow import files
from nsightflow.flops import matmul_precision

DEFAULT_DOMAIN = "nsightflow"


def probe_domain(domain: str) -> str:
    """NVTX domain of the probe pass's step ranges (kept apart from the stages' own domain)."""
    return f"{domain}.probe"


def ops_domain(domain: str) -> str:
    """NVTX domain of the probe pass's operator ranges."""
    return f"{domain}.ops"


class WorkloadError(RuntimeError):
    """The user's workload could not be loaded or run; the message says why and what to change."""


@dataclass
class Stage:
    """One NVTX-ranged stage: ``fn(step)`` is called ``repeats`` times per iteration."""

    name: str
    fn: Callable[[int], Any]
    repeats: int = 1


@dataclass
class Workload:
    setup: Callable[[], None]
    stages: list[Stage]
    device: str = "cpu"
    # The dtype of the model's matrix work, where the probe pass cannot tell: MFU divides by the peak of the
    # precision most GEMM and attention FLOPs ran in (nsightflow.flops.matmul_precision).
    dtype: str | None = None
    params: dict = field(default_factory=dict)
    iterations: int = 1


def require_sizes(**sizes: object) -> None:
    """Raise ValueError naming each size that is not a whole number of 1 or more: a zero batch, prompt or layer
    count makes a workload of no work whose every rate is 0 or undefined, not a measurement."""
    bad = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
    if bad:
        raise ValueError(
            f"sizes {', '.join(f'{k}={v!r}' for k, v in bad.items())}: each must be a whole number of 1 or more"
        )


def load_callable(spec: str) -> Callable[..., Workload]:
    """Import ``package.module:function``; raise WorkloadError naming the spec and the fix."""
    if ":" not in spec:
        raise WorkloadError(f"workload callable {spec!r} is not of the form 'package.module:function'")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or any error raised while the module imports
        raise WorkloadError(
            f"workload callable {spec!r}: importing module {module_name!r} failed: {exc!r}. "
            "Check the module name and that it is importable from the workflow's Python (PYTHONPATH)."
        ) from exc
    try:
        fn = getattr(module, attr)
    except AttributeError as exc:
        raise WorkloadError(f"workload callable {spec!r}: module {module_name!r} has no attribute {attr!r}") from exc
    if not callable(fn):
        raise WorkloadError(f"workload callable {spec!r} is not callable")
    return fn


def build_workload(spec: str, args: dict) -> Workload:
    fn = load_callable(spec)
    try:
        workload = fn(**args)
    except Exception as exc:
        raise WorkloadError(f"workload callable {spec!r} raised while building with {args}: {exc!r}") from exc
    if not isinstance(workload, Workload) or not workload.stages:
        raise WorkloadError(
            f"workload callable {spec!r} returned {type(workload).__name__}, not a nsightflow.harness.Workload "
            "with at least one Stage"
        )
    names = [s.name for s in workload.stages]
    bad_names = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad_names:
        raise WorkloadError(
            f"workload callable {spec!r}: stage name(s) {bad_names!r}: a stage's name is a non-empty string "
            "(it names NVTX ranges, table rows and files)"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise WorkloadError(
            f"workload callable {spec!r}: stage name(s) {twice} used twice; stages are reported by "
            "name, so each needs its own"
        )
    bad = [
        f"{s.name!r} repeats {s.repeats}"
        for s in workload.stages
        if not (isinstance(s.repeats, int) and s.repeats >= 1)
    ]
    if bad or not (isinstance(workload.iterations, int) and workload.iterations >= 1):
        raise WorkloadError(
            f"workload callable {spec!r}: every stage runs at least once: "
            f"{', '.join(bad) or f'iterations {workload.iterations}'}; use a whole number of 1 or more"
        )
    return workload


def steps(workload: Workload) -> list[tuple[Stage, int]]:
    """Every (stage, step index) in the order they run: iteration-major, then stage order, then repeats."""
    out = []
    for it in range(workload.iterations):
        for stage in workload.stages:
            out += [(stage, it * stage.repeats + r) for r in range(stage.repeats)]
    return out


def step_counts(workload: Workload) -> dict[str, int]:
    return {s.name: s.repeats * workload.iterations for s in workload.stages}


def _sync(device: str) -> None:
    """Wait for the GPU, so a range's wall time covers its kernels. Done whenever CUDA is in use, even
    if the workload declared another device or never synchronizes itself."""
    import torch

    if device.startswith("cuda") or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        torch.cuda.synchronize()


def _run_pass(workload: Workload, annotate: Callable | None) -> dict[str, list[float]]:
    """Run setup and every stage step once; return each step's wall time in seconds."""
    _setup(workload)
    times: dict[str, list[float]] = {}
    for stage, step in steps(workload):
        start = time.perf_counter()
        with annotate(stage.name, step) if annotate else nullcontext():
            _call(stage, step)
            _sync(workload.device)
        times.setdefault(stage.name, []).append(time.perf_counter() - start)
    return times


def _setup(workload: Workload) -> None:
    try:
        workload.setup()
    except Exception as exc:
        raise WorkloadError(f"the workload's setup raised: {exc!r}") from exc
    _sync(workload.device)


def _call(stage: Stage, step: int) -> None:
    try:
        stage.fn(step)
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(
            f"stage {stage.name!r} raised at step {step}: {exc!r}. Run the workload once "
            "outside nsightflow to debug it; nothing was measured."
        ) from exc


def _nvtx_ranges(domain: str):
    import nvtx

    def annotate(name: str, step: int):
        return nvtx.annotate(message=name, domain=domain, payload=step)

    return annotate


def probe_pass(workload: Workload, domain: str | None, count: bool, windows=None) -> dict | None:
    """The probe pass (see nsightflow.probe). ``domain``: mark operators and steps with NVTX; ``count``:
    return the analytic FLOP and byte counts per stage; ``windows``: open ncu's profiler windows.

    Under ``windows`` only the steps the plan names run under the operator probe; a step the plan wants
    whole runs as in the ranged pass, inside one window; every other step runs plainly.
    """
    from nsightflow.flops import Tally
    from nsightflow.probe import op_probe

    tally = Tally() if count else None
    mark = _nvtx_ranges(probe_domain(domain)) if domain is not None else None
    probe = op_probe(domain, tally, windows)
    try:
        _probe_steps(workload, tally, mark, probe, windows)
    except WorkloadError as exc:
        if tally is None or windows is not None:
            raise
        # The workload ran in the ranged pass; under the probe it failed: the measurement stands, the count does not.
        tally.failed(
            [s.name for s in workload.stages],
            f"the counting pass (the workload run again under a "
            f"TorchDispatchMode, after the measured pass) failed: {exc}",
        )
    return tally.result() if tally is not None else None


def _probe_steps(workload: Workload, tally, mark, probe, windows) -> None:
    from nsightflow.probe import graph_replays_counted

    _setup(workload)
    with graph_replays_counted(tally):
        for stage, step in steps(workload):
            observed = windows is None or (windows.wanted(stage.name, step) and not windows.whole(stage.name, step))
            with mark(stage.name, step) if mark else nullcontext():
                if tally is not None:
                    tally.begin(stage.name)
                if windows is not None:
                    windows.begin_step(stage.name, step)
                probe.index = 0
                with probe if observed else nullcontext():
                    _call(stage, step)
                _sync(workload.device)
                if windows is not None:
                    windows.end_step()
                if tally is not None:
                    tally.end()


def count_flops(workload: Workload) -> dict:
    """The analytic FLOP and byte counts of every stage (one probe pass, no profiler, no NVTX)."""
    return probe_pass(workload, None, count=True)


def timed_pass(workload: Workload) -> dict[str, list[float]]:
    """Every stage step run as the program runs it (no NVTX range, no profiler collecting), each step's wall time
    in seconds. A profiler that traces every launch slows launch-bound code (nsys: about 30 µs a launch on the
    H200, a 27 ms decode step took 41-45 ms), so the wall times a report divides by come from here."""
    return _run_pass(workload, None)


def capture_range(on: bool) -> None:
    """Open (or close) the profiler's capture range (``cudaProfilerStart``/``Stop``): nsys run with
    ``--capture-range=cudaProfilerApi`` traces only inside it, so the timed pass before it runs unslowed."""
    import torch

    if torch.cuda.is_available():
        import torch.cuda.profiler as cuda_profiler

        (cuda_profiler.start if on else cuda_profiler.stop)()


def run_profiled(
    workload: Workload, domain: str = DEFAULT_DOMAIN, warmup: int = 1, timed: bool = False
) -> tuple[dict[str, list[float]], dict[str, list[float]] | None]:
    """Warm up outside any range; with ``timed``, run the timed pass and then open the profiler's capture range;
    then run every stage step inside its NVTX range. Returns (the ranged pass's step times, the timed pass's)."""
    for _ in range(warmup):
        _run_pass(workload, None)
    program = None
    if timed:
        program = timed_pass(workload)
        capture_range(True)
    return _run_pass(workload, _nvtx_ranges(domain)), program


def trace_label(workload: Workload, name: str) -> str:
    """The stage's label in a torch trace: its index, then its name in printable ASCII.

    torch.profiler exports a non-ASCII ``record_function`` name as "unknown" and writes quotes,
    backslashes and control characters unescaped (the JSON no longer parses: torch 2.13); the index
    keeps every label distinct whatever the names are (a stage named like another's label included).
    ``trace_labels`` in the run record maps labels back to names.
    """
    i = [s.name for s in workload.stages].index(name)
    safe = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "?" for c in name)
    return f"{i} {safe}"


def run_torch_profiled(
    workload: Workload, trace: Path, domain: str = DEFAULT_DOMAIN, warmup: int = 1
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Warm up, run the timed pass, then run every stage step under torch.profiler inside
    ``record_function('domain:stage')``; returns (the profiled pass's step times, the timed pass's).

    The trace (Chrome/Perfetto JSON) records operators on the CPU and, on a GPU, the CUDA kernels
    through CUPTI; ``nsightflow.torchprof`` turns it into the same tables as the nsys path.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(warmup):
        _run_pass(workload, None)
    program = timed_pass(workload)  # before the profiler starts: the program's own step times
    activities = [ProfilerActivity.CPU]
    if workload.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)

    def annotate(name: str, step: int):
        return record_function(f"{domain}:{trace_label(workload, name)}")

    with profile(activities=activities) as prof:
        times = _run_pass(workload, annotate)
    tmp = files.staging(trace)
    prof.export_chrome_trace(str(tmp))
    files.publish(tmp, trace)
    return times, program


def environment(workload: Workload) -> dict:
    """Versions and device facts for the run's manifest."""
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": workload.device,
        "device_name": platform.processor() or platform.machine(),
        "cuda": torch.version.cuda,
    }
    if workload.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(workload.device))
        env.update(
            device_name=props.name,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            memory_bytes=props.total_memory,
        )
    return env


def measure_ceilings(workload: Workload, dtype: str) -> dict:
    """The device's measured matmul rate (in ``dtype``) and copy bandwidth, or why they could not be."""
    from nsightflow.ceilings import measure

    device = workload.device if workload.device.startswith("cuda") else "cpu"
    try:
        return measure(device, dtype)
    except Exception as exc:  # e.g. out of memory beside a large model: no ceiling, never a made-up one
        return {"device": device, "dtype": dtype, "error": f"not measured: {exc!r}"[:500]}


def _write_json(path: Path, data: dict) -> None:
    files.write_json(path, data)


def _read_windows(path: Path):
    from nsightflow.probe import WHOLE, Windows

    plan = json.loads(path.read_text())
    return Windows(
        {(w["stage"], int(w["step"])): (WHOLE if w["units"] is None else set(w["units"])) for w in plan["windows"]}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a workload under NVTX ranges (and probe, count or window it).")
    parser.add_argument("--callable", dest="spec", default="nsightflow.decoder:build")
    parser.add_argument("--args", default="{}", help="JSON object of keyword arguments for the callable")
    parser.add_argument("--domain", default=DEFAULT_DOMAIN)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--mode",
        choices=["profile", "torch", "flops"],
        default="profile",
        help="profile: NVTX ranges for nsys/ncu; torch: torch.profiler trace to --trace; "
        "flops: only the analytic count (to --flops-out)",
    )
    parser.add_argument("--trace", type=Path, help="Chrome trace path for --mode torch")
    parser.add_argument("--flops-out", type=Path, help="run the probe pass and write the analytic FLOP counts here")
    parser.add_argument("--windows", type=Path, help="capture plan: the probe pass opens ncu profiler windows")
    parser.add_argument("--ceilings-out", type=Path, help="measure the device's matmul and copy ceilings, write here")
    parser.add_argument("--out", type=Path, help="write the run's record (stages, params, environment) here")
    parser.add_argument(
        "--timed",
        action="store_true",
        help="after the warm-up, time every step with no NVTX and no profiler collecting, then open the profiler's "
        "capture range (cudaProfilerStart) for the ranged and probe passes (nsys --capture-range=cudaProfilerApi)",
    )
    ns = parser.parse_args(argv)
    # Outputs go where the job asked, whatever the workload does to the working directory (os.chdir).
    for name in ("trace", "flops_out", "windows", "ceilings_out", "out"):
        if getattr(ns, name) is not None:
            setattr(ns, name, getattr(ns, name).resolve())
    from nsightflow.children import die_with_parent

    die_with_parent()  # a workload never outlives the profiler (or job) that launched it
    try:
        args = json.loads(ns.args)
        workload = build_workload(ns.spec, args)
        result: dict = {}
        program = None
        if ns.mode == "profile":
            result["stage_wall_s"], program = run_profiled(workload, ns.domain, ns.warmup, ns.timed)
        elif ns.mode == "torch":
            if ns.trace is None:
                parser.error("--mode torch needs --trace PATH")
            result["stage_wall_s"], program = run_torch_profiled(workload, ns.trace, ns.domain, ns.warmup)
        if program is not None:
            result["program_wall_s"] = program
        counts = None
        if ns.windows is not None:
            probe_pass(workload, ns.domain, count=False, windows=_read_windows(ns.windows))
        elif ns.flops_out is not None or ns.mode == "flops":
            counts = probe_pass(workload, ns.domain if ns.mode == "profile" else None, count=True)
            if ns.flops_out is not None:
                _write_json(ns.flops_out, counts)
            result["analytic"] = counts
        if ns.timed:
            capture_range(False)  # the ceilings need no trace
        matmul = matmul_precision(workload.dtype, counts["stages"] if counts else None)
        if ns.ceilings_out is not None:
            _write_json(ns.ceilings_out, measure_ceilings(workload, matmul.dtype))
    except WorkloadError as exc:
        print(f"nsightflow: {exc}", file=sys.stderr)
        return 2
    result.update(
        callable=ns.spec,
        args=args,
        domain=ns.domain,
        params=workload.params,
        dtype=matmul.dtype,
        precision=matmul.precision,
        precision_source=matmul.source,
        precision_level=matmul.level,
        precision_why=matmul.why,
        iterations=workload.iterations,
        stages=[
            {"name": s.name, "repeats": s.repeats, "steps": s.repeats * workload.iterations} for s in workload.stages
        ],
        trace_labels={trace_label(workload, s.name): s.name for s in workload.stages},
        environment=environment(workload),
    )
    if ns.out:
        _write_json(ns.out, result)
    return 0


if __name__ == "__main__":
    # Run the copy imported as nsightflow.harness, so that the Workload class a user's callable
    # returns is the same class checked here (not a second one defined in __main__).
    from nsightflow.harness import main as _main

    sys.exit(_main())
