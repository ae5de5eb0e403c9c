"""The program the profilers launch: one launch of a workload, its passes (nsightflow.capture.inside.passes) in order:

1. warm-up, outside any range (CUDA context, cuBLAS handles, first-call autotuning);
2. with ``--timed`` (the timeline's launch), every step timed with no NVTX and nothing collecting, then the
   profiler's capture range opened;
3. the ranged pass: every stage step inside its NVTX range (``--mode torch``: under torch.profiler); in a timed launch
   whose first pass did no one-time work the probe pass stands in for it (``passes.probe_stands_in``): its step
   ranges are then the stages' in the timeline;
4. the probe pass: operators numbered, marked and counted (the analytic count rides on this launch), or, under ncu,
   profiler windows opened around the units a capture plan names (that launch runs no ranged pass: 1, then 4);
5. optionally the measured ceilings (nsightflow.capture.inside.ceilings) of the device, in the dtype of the workload's
   matrix work (the one the probe pass saw most GEMM FLOPs in, else the declared one).

Its command line is built and read in one place, :class:`HarnessCall`.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from nsightflow import files
from nsightflow.capture.inside.memory import StepMemory
from nsightflow.capture.inside.passes import (
    capture_range,
    counting_pass,
    probe_pass,
    probe_stands_in,
    ranged_pass,
    run_profiled,
    run_torch_profiled,
    trace_label,
    warm_up,
)
from nsightflow.capture.inside.progress import phase
from nsightflow.domains import DEFAULT_DOMAIN
from nsightflow.precisions import matmul_precision
from nsightflow.records import Ceilings
from nsightflow.workloads.api import WorkloadError, build_workload

if TYPE_CHECKING:
    from nsightflow.capture.inside.probe import Windows


def environment(device: str) -> dict[str, Any]:
    """Versions and facts of the workload's device (``cuda[:n]`` or ``cpu``) for the run's manifest."""
    import torch

    env: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
        "device_name": platform.processor() or platform.machine(),
        "cuda": torch.version.cuda,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(
            device_name=props.name,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            memory_bytes=props.total_memory,
        )
    return env


def measure_ceilings(device: str, dtype: str) -> dict[str, Any]:
    """The device's measured matmul rate (in ``dtype``) and copy bandwidth, or why they could not be."""
    from nsightflow.capture.inside.ceilings import measure

    device = device if device.startswith("cuda") else "cpu"
    try:
        return measure(device, dtype)
    except Exception as exc:  # e.g. out of memory beside a large model: no ceiling, never a made-up one
        return {"device": device, "dtype": dtype, "error": f"not measured: {exc!r}"[:500]}


def read_windows(path: Path, wait: bool = False) -> Windows:
    """The profiler windows a capture plan (plan.json) asks the probe pass to open. ``wait``: the plan is being made
    while this launch starts (nsightflow.capture.launch.ncu_capture); wait until it is published (written whole, then
    renamed into place), however long that takes: the job that makes it kills this launch should it fail."""
    from nsightflow.capture.inside.probe import WHOLE, Windows

    if wait and not path.exists():
        with phase("capture plan awaited"):  # in the log: how much of the plan the program's start did not hide
            while not path.exists():
                time.sleep(0.01)
    plan = json.loads(path.read_text())
    return Windows(
        {(w["stage"], int(w["step"])): (WHOLE if w["units"] is None else set(w["units"])) for w in plan["windows"]}
    )


@dataclass(frozen=True)
class Launch:
    """What a profiler runs: the program's argv, what it adds to the environment, and its working directory."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    gpus: int = 1  # devices it uses (a job of several processes: one per rank)
    awaits_plan: bool = False  # may start before its capture plan exists: it waits for the plan before any window


@dataclass(frozen=True)
class HarnessCall:
    """One launch of the harness: the workload (``spec``, ``args``), its NVTX domain and warm-up passes, the
    interpreter, and what the launch does. ``argv()`` is the command line a profiler runs, ``parse`` reads it back:
    the one place the harness's arguments are written and read."""

    spec: str
    args: dict[str, Any] = field(default_factory=dict)
    domain: str = DEFAULT_DOMAIN
    warmup: int = 1
    python: str | None = None
    mode: Literal["profile", "torch", "flops"] = "profile"
    timed: bool = False  # time every step with nothing collecting, then open the profiler's capture range
    out: str | None = None  # the run's record (stages, params, environment)
    flops_out: str | None = None  # the analytic count, from a probe pass
    ceilings_out: str | None = None  # the measured matmul and copy ceilings
    windows: str | None = None  # a capture plan: the probe pass opens ncu's profiler windows
    await_windows: bool = False  # the plan may not exist yet: wait for it before the windowed pass
    trace: str | None = None  # torch.profiler's Chrome trace (mode torch)

    PATHS = ("out", "flops_out", "ceilings_out", "windows", "trace")

    def argv(self) -> list[str]:
        """The command line: ``python -m nsightflow.capture.inside.harness`` and its options, paths made absolute."""
        out = [canonical_python(self.python or sys.executable), "-m", "nsightflow.capture.inside.harness"]
        out += ["--callable", self.spec, "--args", json.dumps(self.args, sort_keys=True)]
        out += ["--domain", self.domain, "--warmup", str(self.warmup)]
        if self.mode != "profile":
            out += ["--mode", self.mode]
        if self.timed:
            out.append("--timed")
        if self.await_windows:
            out.append("--await-windows")
        for name in self.PATHS:
            value = getattr(self, name)
            if value is not None:
                out += [f"--{name.replace('_', '-')}", str(Path(value).resolve())]
        return out

    def windowed(self, plan_json: str | Path, await_plan: bool = False) -> Launch:
        """The launch ncu runs: the probe pass opens the plan's profiler windows. ``await_plan``: the launch may start
        before the plan exists (it is made meanwhile); the program builds and warms up, then waits for it."""
        call = replace(self, windows=str(plan_json), await_windows=await_plan)
        return Launch(call.argv(), awaits_plan=await_plan)

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> HarnessCall:
        """The call a command line (``argv()``'s, or a user's) describes; paths resolved before the workload can
        change the working directory."""
        ns = _parser().parse_args(argv)
        try:
            args = json.loads(ns.args)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"nsightflow: --args is not a JSON object ({exc}): {ns.args!r}") from exc
        paths = {n: str(Path(getattr(ns, n)).resolve()) for n in cls.PATHS if getattr(ns, n) is not None}
        if ns.mode == "torch" and "trace" not in paths:
            raise SystemExit("nsightflow: --mode torch needs --trace PATH")
        return cls(
            ns.spec,
            args,
            ns.domain,
            ns.warmup,
            sys.executable,
            ns.mode,
            ns.timed,
            await_windows=ns.await_windows,
            **paths,
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run a workload under NVTX ranges (and probe, count or window it).")
    parser.add_argument("--callable", dest="spec", default="nsightflow.workloads.decoder:build")
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
    parser.add_argument("--trace", help="Chrome trace path for --mode torch")
    parser.add_argument("--flops-out", help="run the probe pass and write the analytic FLOP counts here")
    parser.add_argument("--windows", help="capture plan: the probe pass opens ncu profiler windows")
    parser.add_argument(
        "--await-windows",
        action="store_true",
        help="the capture plan is being made while the program starts: wait for it before the windowed pass",
    )
    parser.add_argument("--ceilings-out", help="measure the device's matmul and copy ceilings, write here")
    parser.add_argument("--out", help="write the run's record (stages, params, environment) here")
    parser.add_argument(
        "--timed",
        action="store_true",
        help="after the warm-up, time every step with no NVTX and no profiler collecting, then open the profiler's "
        "capture range (cudaProfilerStart) for the ranged and probe passes (nsys --capture-range=cudaProfilerApi)",
    )
    return parser


def canonical_python(path: str) -> str:
    """One name for one interpreter: symlinks followed while they stay in the same folder (``python`` →
    ``python3`` in a virtual environment), so ``snakemake`` and ``python -m snakemake`` rerun nothing; a link
    out of the folder (a venv's interpreter → the system's) is kept, or the venv's packages would be lost."""
    current = Path(os.path.abspath(path))
    for _ in range(10):
        if not current.is_symlink():
            break
        target = Path(os.path.normpath(current.parent / os.readlink(current)))
        if target.parent != current.parent:
            break
        current = target
    return str(current)


def main(argv: list[str] | None = None) -> int:
    call = HarnessCall.parse(argv)
    from nsightflow.capture.launch.children import die_with_parent

    die_with_parent()  # a workload never outlives the profiler (or job) that launched it
    # Epoch times, beside the profiler's own start and end in the job's log: its start-up and its work after the
    # program (nsys's report and export) are the rest.
    print(f"nsightflow: the harness starts at {time.time():.3f}", file=sys.stderr, flush=True)
    try:
        with phase("workload built"):
            workload = build_workload(call.spec, call.args)
        result: dict[str, Any] = {}
        program = None
        memory = StepMemory()
        if call.windows is not None:
            # ncu's launch: the windows open in the probe pass, so no ranged pass (under ncu every launch outside a
            # window still costs about 0.1 ms: a pass of the 8B-shaped decoder took 4-5 s there, 0.85 s alone)
            warm_up(workload, call.warmup)
        elif call.mode == "profile":
            work = warm_up(workload, call.warmup) if call.warmup else None
            alone = probe_stands_in(call.timed, call.flops_out is not None, work)
            result["first_pass_work"], result["traced_pass"] = work, "probe" if alone else "ranged"
            result["stage_wall_s"], program = run_profiled(
                workload, call.domain, 0, call.timed, ranged=not alone, memory=memory
            )
        elif call.mode == "torch":
            assert call.trace is not None  # parse() refuses torch without a trace
            result["stage_wall_s"], program = run_torch_profiled(
                workload, Path(call.trace), call.domain, call.warmup, memory
            )
        if program is not None:
            result["program_wall_s"] = program
            result["program_memory"] = memory.peaks
        counts = None
        if call.windows is not None:
            windows = read_windows(Path(call.windows), wait=call.await_windows)
            probe_pass(workload, call.domain, count=False, windows=windows)
        elif call.flops_out is not None or call.mode == "flops":
            counts, finished = counting_pass(workload, call.domain if call.mode == "profile" else None)
            if result.get("traced_pass") == "probe" and not finished:
                # the probe pass stopped part-way: the timeline gets the program's steps from a ranged pass after all
                result["traced_pass"] = "ranged"
                with phase("ranged pass"):
                    result["stage_wall_s"] = ranged_pass(workload, call.domain)
            if counts is not None and call.flops_out is not None:
                counts.write(call.flops_out)
            result["analytic"] = counts.to_dict() if counts is not None else None
        if call.timed:
            capture_range(False)  # the ceilings need no trace (nsys, told to trace to the exit, ignores it)
        matmul = matmul_precision(workload.dtype, counts.stages if counts else None)
        if call.ceilings_out is not None:
            with phase("ceilings measured"):
                Ceilings.from_dict(measure_ceilings(workload.device, matmul.dtype)).write(call.ceilings_out)
    except WorkloadError as exc:
        print(f"nsightflow: {exc}", file=sys.stderr)
        return 2
    result.update(
        callable=call.spec,
        args=call.args,
        domain=call.domain,
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
        environment=environment(workload.device),
    )
    if call.out:
        files.write_json(call.out, result)
    print(f"nsightflow: the harness ends at {time.time():.3f}", file=sys.stderr, flush=True)
    return 0


def launch(argv: list[str] | None = None) -> NoReturn:
    """Run the harness as a program and exit with its status. A profiled launch (the timeline's, timed; ncu's,
    windowed) ends once its outputs are written and the workload's own exit handlers have run, without the
    interpreter's teardown: freeing the CUDA context and every module of an 8B-shaped decoder took 0.7-0.9 s after
    the harness's last line, which nsys and ncu wait for (``benchmarks/exit_costs.py``: nsys recorded every stage kernel
    and NVTX range either way, ncu every planned launch). The program alone (no profiler) exits as any program does."""
    call = HarnessCall.parse(argv)
    status = main(argv)
    if not (call.timed or call.windows is not None):
        sys.exit(status)
    atexit._run_exitfuncs()  # the workload's (and torch's) exit handlers, as at a normal exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    # Run the copy imported as nsightflow.capture.inside.harness, so that the Workload class a user's callable
    # returns is the same class checked here (not a second one defined in __main__).
    from nsightflow.capture.inside.harness import launch as _launch

    _launch()
