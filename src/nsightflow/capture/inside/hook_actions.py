"""What the hook (nsightflow.capture.inside.hook) does at a command's stage step boundaries, per mode: the same probe,
tally, windows and torch.profiler ranges the harness's passes (nsightflow.capture.inside.passes) use for a callable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.domains import probe_domain, ranks_domain
from nsightflow.records import trace_path


def device_in_use() -> str:
    """``cuda`` where the program used the GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"


def one_process() -> bool:
    """Whether this process computes alone, not as one rank of several (whose peers would wait for it in their
    collectives)."""
    import os
    import sys

    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):
        return False
    dist = sys.modules.get("torch.distributed")
    try:
        return not (dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    except (RuntimeError, ValueError):
        return False


def end_program(why: str) -> None:
    """End the profiled program now, its output flushed: nothing after this point is measured, and a long run (a
    server's window) would otherwise run to its end at a profiler's pace. The step has synchronized, so every
    profiled kernel has been collected (ncu collects one as it runs; nsys has flushed at its capture range's end)."""
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    sys.stderr.write(f"nsightflow: {why}\n")
    sys.stderr.flush()
    os._exit(0)


class _Ranges:
    """Push/pop ranges in nsightflow's domains, straight through the nvtx library (never the program's wrappers)."""

    def __init__(self, names: list[str]) -> None:
        import nvtx

        self.domains = [nvtx.get_domain(n) for n in names]

    def push(self, stage: str, step: int) -> None:
        for d in self.domains:
            d.push_range(d.get_event_attributes(message=stage, payload=step))

    def pop(self) -> None:
        for d in reversed(self.domains):
            d.pop_range()


class ProbeActions:
    """Modes probe (ranges mirrored, operators marked and counted), ranged (ranges mirrored only: a program that
    compiles runs as it is), ncu (windows) and count (operators counted).

    ``profiled`` False: a rank other than the profiled one under nsys, probed and counted the same way (so that no
    rank waits in a collective on another's probing) with its steps and operators in the ranks domain only, its
    count not written."""

    quiet = False

    def __init__(self, s: HookSettings, profiled: bool = True) -> None:
        from nsightflow.capture.inside.flops import Tally
        from nsightflow.capture.inside.probe import graph_replays_counted

        self.s = s
        self.profiled = profiled
        self.ops_base = s.mirror if profiled else ranks_domain(s.mirror)  # where its operator marks go
        self.tally = Tally() if s.mode in ("probe", "count") else None
        self.windows = None
        self._plan = Path(s.windows) if s.mode == "ncu" and s.windows else None
        if self._plan is not None and not s.await_windows:
            self.windows = self._windows()
        # As the harness does: the probe run's steps in the stages' and the probe domain, the ncu run's in the probe
        # domain (its results' NVTX stacks say which step and operator); operators marked in both.
        probe = [ranks_domain(s.mirror), s.mirror, probe_domain(s.mirror)]
        domains = {
            "probe": probe if profiled else probe[:1],
            "ranged": probe[:2] if profiled else probe[:1],
            "ncu": [probe_domain(s.mirror)],
        }.get(s.mode)
        self.probing = s.mode != "ranged"  # no TorchDispatchMode where the program compiles and is measured
        # peak memory per stage, in the runs whose steps end synchronized anyway (never in the timed run, whose steps
        # keep the program's pace): the run under nsys (the program as it runs), the count run
        self.memory: Any = None
        if profiled and s.mode in ("probe", "ranged", "count"):
            from nsightflow.capture.inside.memory import StepMemory

            self.memory = StepMemory()
        self.stage = ""  # the step's, between begin and end
        self.marks = _Ranges(domains) if domains else None
        self.probe: Any = None
        self.capturing = False  # a window's capture range is open (HookSettings.capture_range)
        self._replays = graph_replays_counted(self.tally)
        self._replays.__enter__()  # for the whole program: a replay inside a step is that step's

    def _windows(self) -> Any:
        """The plan's windows (read at the first step where the plan is made while the program starts: the job
        makes it beside the program's own start-up, and kills this launch should it fail)."""
        from nsightflow.capture.inside.harness import read_windows

        plan, self._plan = self._plan, None
        assert plan is not None
        return read_windows(plan, wait=self.s.await_windows)

    def begin(self, stage: str, step: int) -> None:
        from nsightflow.capture.inside.probe import op_probe

        if self._plan is not None:
            self.windows = self._windows()
        if self.s.capture_range and not self.capturing:  # the window's first profiled step: nsys starts tracing
            from nsightflow.capture.inside.passes import capture_range

            self.capturing = True
            capture_range(True)
        if self.marks is not None:
            self.marks.push(stage, step)
        self.stage = stage
        if self.memory is not None:
            self.memory.start()
        if self.tally is not None:
            self.tally.begin(stage)
        if self.windows is not None:
            self.windows.begin_step(stage, step)
        self.observed = self.probing and (
            self.windows is None or (self.windows.wanted(stage, step) and not self.windows.whole(stage, step))
        )
        if self.observed:
            if self.probe is None:  # made at the first probed step: a program that compiles has loaded dynamo by then
                self.probe = op_probe(self.ops_base if self.marks is not None else None, self.tally, self.windows)
            self.probe.index = 0
            self.probe.__enter__()

    def end(self) -> None:
        if self.observed:
            self.probe.__exit__(None, None, None)
        if self.memory is not None:
            self.memory.stop(self.stage)
        if self.windows is not None:
            self.windows.end_step()
        if self.tally is not None:
            self.tally.end()
        if self.marks is not None:
            self.marks.pop()
        if self.windows is not None and self.windows.done and one_process():
            end_program("the capture plan's last window has ended: ncu's launch of the program stops here")

    def last_step(self) -> None:
        """After the last profiled step: a window's trace ends (nsys stops collecting; the program runs on)."""
        if self.capturing:
            from nsightflow.capture.inside.passes import capture_range

            self.capturing = False
            capture_range(False)

    def finish(self) -> dict[str, Any]:
        from nsightflow.capture.inside.harness import environment, measure_ceilings
        from nsightflow.capture.inside.progress import phase
        from nsightflow.precisions import matmul_precision
        from nsightflow.records import Ceilings

        self._replays.__exit__(None, None, None)
        if not self.profiled:
            return {}
        with phase("operator count written"):  # the probe run's log splits its end (docs/benchmarks.md)
            counts = self.tally.result() if self.tally is not None else None
            if counts is not None and self.s.flops_out:
                counts.write(self.s.flops_out)
        matmul = matmul_precision(self.s.dtype, counts.stages if counts else None)
        device = device_in_use()
        if self.s.ceilings_out:
            with phase("ceilings measured"):
                Ceilings.from_dict(measure_ceilings(device, matmul.dtype)).write(self.s.ceilings_out)
        return {
            "program_memory": self.memory.peaks if self.memory is not None else None,
            "dtype": matmul.dtype,
            "precision": matmul.precision,
            "precision_source": matmul.source,
            "precision_level": matmul.level,
            "precision_why": matmul.why,
            "environment": environment(device),
        }


class TorchActions:
    """Mode torch: the whole program under torch.profiler, each step inside ``record_function('<mirror>:<label>')``.

    torch.profiler is thread-local: it starts at the first step, on that step's thread, and stops after the last step
    the timed run had (``HookSettings.steps``), on the same thread; kineto killed the process (SIGSEGV) when a program
    whose steps ran in a worker thread stopped it from the main thread at exit."""

    quiet = False

    def __init__(self, s: HookSettings, rank: int | None) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.s = s
        self.trace = trace_path(s.trace, rank, s.rank) if s.trace else None
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.prof = profile(activities=activities)
        self.prof.start()
        self.ranges: list[Any] = []
        self.stopped = False

    def begin(self, stage: str, step: int) -> None:
        from torch.profiler import record_function

        label = self.s.labels.get(stage, f"? {stage}")
        rf = record_function(f"{self.s.mirror}:{label}")
        rf.__enter__()
        self.ranges.append(rf)

    def end(self) -> None:
        self.ranges.pop().__exit__(None, None, None)

    def last_step(self) -> None:
        """Stop the profiler and write the trace (after the program's last step, on its thread)."""
        from nsightflow import files

        if self.stopped:
            return
        self.stopped = True
        self.prof.stop()
        if self.trace:
            tmp = files.staging(self.trace)
            self.prof.export_chrome_trace(str(tmp))
            files.publish(tmp, self.trace)

    def finish(self) -> dict[str, Any]:
        from nsightflow.capture.inside.harness import environment

        self.last_step()  # a run whose step count is not known: at exit
        return {"environment": environment(device_in_use()), "trace_labels": {v: k for k, v in self.s.labels.items()}}


class TimedActions:
    """Mode timed, and a rank that is not profiled under ncu or in the count run: nothing at the steps."""

    quiet = True  # nothing to call at a step's begin and end (the hook skips the calls)

    def begin(self, stage: str, step: int) -> None:
        pass

    def last_step(self) -> None:
        pass

    def end(self) -> None:
        pass

    def finish(self) -> dict[str, Any]:
        return {}


def for_mode(s: HookSettings, rank: int | None = None) -> ProbeActions | TorchActions | TimedActions:
    """The actions of mode ``s.mode`` in a process of rank ``rank`` (None: a lone process, which is profiled)."""
    if s.mode == "torch":
        return TorchActions(s, rank)
    profiled = rank is None or rank == s.rank
    if s.mode == "timed" or (not profiled and s.mode not in ("probe", "ranged")):
        return TimedActions()
    return ProbeActions(s, profiled)
