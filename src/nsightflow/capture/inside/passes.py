"""The passes of a workload's one launch: warm-up, the timed pass (the program's own wall times), the ranged pass
(every step in its NVTX range, synchronized before the range ends), the probe pass (operators numbered, marked,
counted, or windowed for ncu: nsightflow.capture.inside.probe), and the torch.profiler pass.
nsightflow.capture.inside.harness runs them as a program."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsightflow import files
from nsightflow.capture.inside.progress import phase
from nsightflow.domains import DEFAULT_DOMAIN, probe_domain
from nsightflow.records import AnalyticCounts
from nsightflow.workloads.api import Stage, Workload, WorkloadError, steps

if TYPE_CHECKING:
    from nsightflow.capture.inside.flops import Tally
    from nsightflow.capture.inside.memory import StepMemory
    from nsightflow.capture.inside.probe import Windows


def _sync(device: str) -> None:
    """Wait for the GPU, so a range's wall time covers its kernels. Done whenever CUDA is in use, even
    if the workload declared another device or never synchronizes itself."""
    import torch

    if device.startswith("cuda") or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        torch.cuda.synchronize()


def _run_pass(
    workload: Workload,
    annotate: Callable[..., Any] | None,
    turn: Callable[[], AbstractContextManager[Any]] | None = None,
    memory: StepMemory | None = None,
) -> dict[str, list[float]]:
    """Run setup and every stage step once; return each step's wall time in seconds. ``turn``: a context entered
    around the setup and around each step, outside its timing (processes taking turns step by step); ``memory``:
    each stage's peak memory, read and reset outside the timing."""
    with turn() if turn else nullcontext():
        _setup(workload)
    times: dict[str, list[float]] = {}
    for stage, step in steps(workload):
        with turn() if turn else nullcontext():
            if memory is not None:
                memory.start()
            start = time.perf_counter()
            with annotate(stage.name, step) if annotate else nullcontext():
                _call(stage, step)
                _sync(workload.device)
            times.setdefault(stage.name, []).append(time.perf_counter() - start)
            if memory is not None:
                memory.stop(stage.name)
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


def _nvtx_ranges(domain: str) -> Callable[[str, int], AbstractContextManager[Any]]:
    import nvtx

    def annotate(name: str, step: int) -> AbstractContextManager[Any]:
        return nvtx.annotate(message=name, domain=domain, payload=step)

    return annotate


def probe_pass(
    workload: Workload, domain: str | None, count: bool, windows: Windows | None = None
) -> AnalyticCounts | None:
    """The probe pass (see nsightflow.capture.inside.probe). ``domain``: mark operators and steps with NVTX; ``count``:
    return the analytic FLOP and byte counts per stage; ``windows``: open ncu's profiler windows.

    Under ``windows`` only the steps the plan names run under the operator probe; a step the plan wants
    whole runs as in the ranged pass, inside one window; every other step runs plainly.
    """
    return _probe(workload, domain, count, windows)[0]


def counting_pass(workload: Workload, domain: str | None) -> tuple[AnalyticCounts, bool]:
    """The probe pass that counts (and, with ``domain``, marks): (the counts, whether it ran every step). A step that
    raised under the probe after the program ran it unprobed leaves the counts missing, not the run."""
    counts, finished = _probe(workload, domain, True, None)
    assert counts is not None  # a counting pass always has its tally
    return counts, finished


def _probe(
    workload: Workload, domain: str | None, count: bool, windows: Windows | None
) -> tuple[AnalyticCounts | None, bool]:
    from nsightflow.capture.inside.flops import Tally
    from nsightflow.capture.inside.probe import op_probe

    tally = Tally() if count else None
    mark = _nvtx_ranges(probe_domain(domain)) if domain is not None else None
    probe = op_probe(domain, tally, windows)
    what = "windowed" if windows is not None else "counting" if count else "marking"
    finished = True
    try:
        with phase(f"probe pass ({what})"):
            _probe_steps(workload, tally, mark, probe, windows)
    except WorkloadError as exc:
        if tally is None or windows is not None:
            raise
        # The workload ran in the ranged pass; under the probe it failed: the measurement stands, the count does not.
        finished = False
        tally.failed(
            [s.name for s in workload.stages],
            f"the counting pass (the workload run again under a "
            f"TorchDispatchMode, after the measured pass) failed: {exc}",
        )
    return (tally.result() if tally is not None else None), finished


def _probe_steps(workload: Workload, tally: Tally | None, mark: Any, probe: Any, windows: Windows | None) -> None:
    from nsightflow.capture.inside.probe import graph_replays_counted

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


def count_flops(workload: Workload) -> AnalyticCounts | None:
    """The analytic FLOP and byte counts of every stage (one probe pass, no profiler, no NVTX)."""
    return probe_pass(workload, None, count=True)


def timed_pass(
    workload: Workload,
    turn: Callable[[], AbstractContextManager[Any]] | None = None,
    memory: StepMemory | None = None,
) -> dict[str, list[float]]:
    """Every stage step run as the program runs it (no NVTX range, no profiler collecting), each step's wall time
    in seconds. A profiler that traces every launch slows launch-bound code (nsys: about 30 µs a launch on the
    H200, a 27 ms decode step took 41-45 ms), so the wall times a report divides by come from here. ``turn``: see
    ``_run_pass`` (the GPU tier's wall-time test runs this pass in processes taking turns); ``memory``: each stage's
    peak memory (nsightflow.capture.inside.memory)."""
    return _run_pass(workload, None, turn, memory)


def capture_range(on: bool) -> None:
    """Open (or close) the profiler's capture range (``cudaProfilerStart``/``Stop``): nsys run with
    ``--capture-range=cudaProfilerApi`` traces only inside it, so the timed pass before it runs unslowed."""
    import torch

    if torch.cuda.is_available():
        import torch.cuda.profiler as cuda_profiler

        with phase(f"capture range {'opened' if on else 'closed'}"):  # under nsys, its tracing starts or flushes
            if on:
                cuda_profiler.start()
            else:
                cuda_profiler.stop()


# Live device allocations a first pass may leave without making state of its own: cuBLAS's and cuBLASLt's workspaces.
LIBRARY_ALLOCATIONS = 4


def warm_up(workload: Workload, passes: int) -> list[str]:
    """Run every stage step ``passes`` times outside any range: CUDA context, library handles, autotuning and
    compilation happen here, so the passes that follow launch what the program launches in steady state. Returns
    what the first pass did once that launches kernels of its own (see ``first_pass_work``)."""
    work: list[str] = []
    for i in range(passes):
        before = _live_allocations()
        with phase(f"warm-up pass {i + 1}"):
            times = _run_pass(workload, None)
        if i == 0:
            work = first_pass_work(before, _live_allocations())
            seen = "; ".join(work) or "none seen"
            print(f"nsightflow: the first pass's one-time work: {seen}", file=sys.stderr, flush=True)
        # where a first pass's extra time goes (library handles, autotuning, compilation): each stage's first step
        split = ", ".join(f"{k} {t[0]:.2f} s first step, {sum(t[1:]):.2f} s the rest" for k, t in times.items())
        print(f"nsightflow: warm-up pass {i + 1} by stage: {split}", file=sys.stderr, flush=True)
    return work


def _live_allocations() -> int | None:
    """Device memory blocks the program holds now (torch's caching allocator), or None without CUDA in use."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    return int(torch.cuda.memory_stats().get("allocation.all.current", 0))


def first_pass_work(before: int | None, after: int | None) -> list[str]:
    """What a workload's first pass did once that launches kernels a later pass does not, from what torch records:
    compilation (with its autotuning), cuDNN's benchmarking, Triton in use (its autotuner times kernels on their first
    call), state made on first use and kept (an optimizer's moments: device allocations that outlive the pass,
    beyond the math libraries' workspaces). Empty: ncu's launch may window the program's first pass
    (nsightflow.capture.launch.program.ncu_launches)."""
    import torch

    work = []
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        graphs = int(counters["stats"]["unique_graphs"])
        if graphs:
            work.append(f"torch.compile made {graphs} graph(s)")
    if torch.backends.cudnn.benchmark:
        work.append("torch.backends.cudnn.benchmark is on")
    if "triton" in sys.modules:
        work.append("Triton is imported")
    if before is not None and after is not None and after - before > LIBRARY_ALLOCATIONS:
        work.append(f"{after - before} device allocations made in the first pass outlive it")
    if before is None and after is not None:
        work.append("CUDA was first used in the first pass")
    return work


def run_profiled(
    workload: Workload,
    domain: str = DEFAULT_DOMAIN,
    warmup: int = 1,
    timed: bool = False,
    ranged: bool = True,
    memory: StepMemory | None = None,
) -> tuple[dict[str, list[float]] | None, dict[str, list[float]] | None]:
    """Warm up outside any range; with ``timed``, run the timed pass (``memory``: its peaks per stage) and then open
    the profiler's capture range; then, with ``ranged``, run every stage step inside its NVTX range. Returns (the
    ranged pass's step times, the timed pass's)."""
    warm_up(workload, warmup)
    program = None
    if timed:
        with phase("timed pass"):
            program = timed_pass(workload, memory=memory)
        capture_range(True)
    if not ranged:
        return None, program
    with phase("ranged pass"):
        return ranged_pass(workload, domain), program


def ranged_pass(workload: Workload, domain: str) -> dict[str, list[float]]:
    """Every stage step inside its NVTX range of ``domain``; each step's wall time in seconds."""
    return _run_pass(workload, _nvtx_ranges(domain))


def probe_stands_in(timed: bool, probed: bool, first_pass_work: list[str] | None) -> bool:
    """Whether the timeline's launch traces the probe pass alone, its step ranges standing for the stages' (no ranged
    pass: about 3.7 s of nsys's tracing and export on the 8B-shaped decoder). Only where the probe pass launches what
    the program launches: a timed launch (the wall times are the timed pass's) with a probe pass, whose first pass did
    no one-time work (``first_pass_work`` empty: no compilation, autotuning or state made on first use; a compiled
    program's probe pass runs it eagerly, and the ranged pass is then the program's only trace)."""
    return timed and probed and first_pass_work == []


def trace_label(workload: Workload, name: str) -> str:
    """The stage's label in a torch trace: its index, then its name in printable ASCII.

    torch.profiler exports a non-ASCII ``record_function`` name as "unknown" and writes quotes,
    backslashes and control characters unescaped (the JSON no longer parses: torch 2.13); the index
    keeps every label distinct whatever the names are (a stage named like another's label included).
    ``trace_labels`` in the run record maps labels back to names.
    """
    return safe_label([s.name for s in workload.stages].index(name), name)


def safe_label(index: int, name: str) -> str:
    """``index name`` with every character torch.profiler cannot export as it is replaced by ``?``."""
    safe = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "?" for c in name)
    return f"{index} {safe}"


def run_torch_profiled(
    workload: Workload, trace: Path, domain: str = DEFAULT_DOMAIN, warmup: int = 1, memory: StepMemory | None = None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Warm up, run the timed pass, then run every stage step under torch.profiler inside
    ``record_function('domain:stage')``; returns (the profiled pass's step times, the timed pass's).

    The trace (Chrome/Perfetto JSON) records operators on the CPU and, on a GPU, the CUDA kernels
    through CUPTI; ``nsightflow.analysis.torchprof`` turns it into the same tables as the nsys path.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    warm_up(workload, warmup)
    program = timed_pass(workload, memory=memory)  # before the profiler starts: the program's own step times
    activities = [ProfilerActivity.CPU]
    if workload.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)

    def annotate(name: str, step: int) -> AbstractContextManager[Any]:
        return record_function(f"{domain}:{trace_label(workload, name)}")

    with profile(activities=activities) as prof:
        times = _run_pass(workload, annotate)
    tmp = files.staging(trace)
    prof.export_chrome_trace(str(tmp))
    files.publish(tmp, trace)
    return times, program
