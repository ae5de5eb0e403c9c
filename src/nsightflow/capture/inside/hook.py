"""Inside a command's own program: its NVTX ranges followed, its stage steps run as the harness runs a callable's.

A command workload (``command:`` in the config) is a program nsightflow did not write: its stages are its own
NVTX ranges. nsightflow puts a ``sitecustomize`` on the program's ``PYTHONPATH`` (a private folder of the run:
nsightflow.capture.launch.hook_site) that installs the hook at interpreter start (capture.inside.hook_install) when
``NSIGHTFLOW_HOOK`` holds :class:`HookSettings`. The hook wraps the NVTX calls a Python program makes
(``nvtx.annotate``/``push_range``/``pop_range``, ``torch.cuda.nvtx.range``/``range_push``/``range_pop``) and, around
each *stage step* (a push/pop range of the stages' domain, top level or named in the config), does what the harness
does around a callable's step:

- ``timed``: nothing but a clock (every range of every domain logged, the stages discovered from them later:
  nsightflow.capture.inside.hook_timed; run beside the nsys launch, whose program the hook holds until this run has
  ended: nsightflow.capture.inside.gate);
- ``probe`` (under nsys): the step mirrored into nsightflow's own domain (the ranged pass) and its probe domain,
  its operators numbered, marked and counted (nsightflow.capture.inside.probe): the timeline reads as a callable's does;
- ``ranged`` (under nsys, where the timed run saw ``torch.compile`` make graphs): the step mirrored only. A
  ``TorchDispatchMode`` such as the probe makes torch.compile skip every frame ("non-infra torch dispatch mode
  present"), so a compiled program is never probed where it is measured: it is counted in a ``count`` run of its
  own, with compilation off;
- ``ncu``: the capture plan's profiler windows opened around the planned operators of the planned steps;
- ``torch``: the step inside ``record_function`` under a torch.profiler started at interpreter start;
- ``count``: the operators counted (analytic FLOPs and bytes) with nothing else.

A program that opens no NVTX range of its own has automatic stages (nsightflow.capture.inside.hook_auto): its
training iterations and top-level model calls; or the calls of the functions the config names as its steps
(nsightflow.capture.inside.hook_steps); both followed as ranges of ``AUTO_DOMAIN`` by the same step logic.

Steps the timed run found to be warm-up (nsightflow.capture.read.warmup: compilation, CUDA-graph recording, cold caches)
are followed in every later run, synchronized at their end, and nothing else: no profiler window, mirror or count
(``HookSettings.skip``).

Under a profiler the GPU is synchronized before each step's range ends (the NVTX guide's rule, kept for programs that
forget it), so a step's window holds its kernels. The timed run never waits: its walls are the program's own pace,
read from the GPU's clock (nsightflow.capture.inside.step_clock). Each process writes its record (rank, steps' wall
times, environment; the timed run's ranges) at exit, beside ``out`` (:func:`record_path`).

A job of several processes (torchrun, ``torch.multiprocessing``): the settings stay in the environment, so every
Python process the command starts loads the hook. A process that runs stage steps is a *rank* (``RANK``, else its
``torch.distributed`` rank at its first step). Under nsys every rank mirrors its steps into nsightflow's ranks
domain (nsightflow.domains.ranks_domain) so the timeline gives each rank its stages, and every rank runs the probe
(so that none waits in a collective on another's probing); only the profiled rank (``HookSettings.rank``) has its
steps in nsightflow's own domains, is counted, captured by ncu and measures the ceilings; under torch.profiler each
rank writes its own trace (nsightflow.records.trace_path).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from threading import get_ident
from time import perf_counter_ns
from typing import Any

from nsightflow.capture.inside import step_clock
from nsightflow.capture.inside.hook_actions import end_program, one_process
from nsightflow.capture.inside.hook_settings import HookSettings, record_path
from nsightflow.domains import AUTO_DOMAIN

# While the rank is not known (a process of one, or ranks not yet up), a push looks for it at most once in this many
# ns, not at every range of a host-bound loop (gpt-fast's compiled decode step: 0.23 ms, four to a millisecond):
# looking (torch.distributed's state) took 0.6 µs in a loop of its own on a CPU where a push and pop took 3.3 µs.
# (The timed run looks only where it clocks a range on the GPU: nsightflow.capture.inside.hook_timed.)
RANK_EVERY_NS = 1_000_000


class Tracker:
    """Follows the program's push/pop ranges per thread and acts at stage step boundaries (see the module's doc); the
    timed run's is a nsightflow.capture.inside.hook_timed.TimedTracker (capture.inside.hook_install.tracker_for)."""

    def __init__(self, settings: HookSettings) -> None:
        self.s = settings
        self.lock = threading.RLock()
        self.stacks: dict[int, list[tuple[str, str, int]]] = {}  # thread -> (domain, name, start ns)
        self.step: tuple[str, int, int, int, bool] | None = None  # stage, step, thread, depth of its range, set apart
        self.counts: dict[str, int] = {}
        self.walls: dict[str, list[float]] = {}
        self.started = time.perf_counter()
        self.started_epoch = time.time()  # the install, on the wall clock (the job's log sets the runs side by side)
        self.started_ns = time.perf_counter_ns()  # the install, on the ranges' clock (a first step's delay from it)
        self.inside = False  # the hook's own NVTX calls are not the program's
        self.actions: Any = None  # what each mode does at step boundaries (Actions), made at the first step
        self.rank: int | None = None  # this process's rank in a job of several (None: not known, or none)
        self.env_rank = os.environ.get("RANK", "")  # read once: pushes look for the rank until it is known
        self.rank_looked = -RANK_EVERY_NS  # when a push last looked for it (perf_counter_ns)
        self.gated = settings.gate is not None and settings.mode in ("probe", "timed", "ncu")  # not yet past the gate
        self.own = False  # whether the program has opened an NVTX range of its own
        self.auto: Any = None  # the automatic stages' hooks (nsightflow.capture.inside.hook_auto), while followed
        self.tuning: Any = None  # autotuning choices recorded or taken (nsightflow.capture.inside.hook_tuning)
        self.steps_by: Any = None  # the step functions followed, their inputs (nsightflow.capture.inside.hook_steps)
        self.contacts: Any = None  # where a late gate stops the program (nsightflow.capture.inside.gate.Contacts)

    def follows_auto(self) -> bool:
        """Whether the automatic stages (nsightflow.capture.inside.hook_auto) are followed: they are the stages, or the
        stages are not known yet and the program has opened no range of its own."""
        return self.s.domain == AUTO_DOMAIN or (self.s.domain is None and not self.own)

    def pass_gate(self, contact: str = "install") -> None:
        """A launch beside another (nsightflow.capture.inside.gate), at install or at the program's first contact
        (``gate_at``; any thread): the probe (and an ncu launch started beside the timeline) waits for the stages the
        timed run found; the timed run waits until every gated launch is ready (so that none of its program, clocks
        included, shares the machine with another launch's start-up)."""
        if not self.gated:
            return
        with self.lock:
            if self.gated:
                self._through_gate(contact)

    def _through_gate(self, contact: str) -> None:
        from nsightflow.capture.inside import gate

        assert self.s.gate is not None
        began = time.perf_counter()
        if self.s.mode == "timed":
            gated = {self.s.gate: self.s.gate_pid} if self.s.gate_pid is not None else {}
            for path, pid in {**gated, **self.s.also_gated}.items():
                if not gate.wait_ready(path, pid):
                    sys.stderr.write(
                        f"nsightflow: a profiled launch was not ready after {gate.READY_WAIT_S:.0f} s: the timed run "
                        "goes on beside its start\n"
                    )
        else:
            found = gate.wait_open(self.s.gate)
            skip, tuning, steps = found.get("skip") or {}, found.get("tuning") or None, found.get("steps") or {}
            self.s = replace(self.s, domain=found["domain"], stages=found["stages"], skip=skip, tuning=tuning)
            self.s = replace(self.s, steps=steps)
            if self.s.mode == "probe" and not found.get("probe", True):  # the program compiles: its steps run as
                self.s = replace(self.s, mode="ranged", flops_out=None, ceilings_out=None)  # they are, unprobed
        self.gated = False
        if self.contacts is not None:  # past the gate at a contact: what install set up without the stages
            self.contacts.remove()
            if self.s.mode != "timed":
                self._after_late_gate()
                waited = time.perf_counter() - began
                sys.stderr.write(f"nsightflow: this launch waited {waited:.2f} s at its first contact ({contact})\n")

    def _after_late_gate(self) -> None:
        """The probe past a late gate (``gate_at`` contact): the timed run's autotuning choices taken, and the
        automatic stages followed where the stages it found are theirs (install could not know)."""
        if self.tuning is not None and self.tuning.replay:
            self.tuning.take_choices(self.s.tuning or {})
        if self.steps_by is None:
            if self.auto is not None and not self.follows_auto():
                self.auto.remove()
                self.auto = None
            elif self.auto is None and self.follows_auto():
                from nsightflow.capture.inside import hook_auto

                self.auto = hook_auto.install(self)

    def look_for_rank(self) -> None:
        """While the rank is not known: torch.distributed's, at most once in RANK_EVERY_NS (caught while it is up: a
        program may end it before exit)."""
        if self.rank is None:
            now = perf_counter_ns()
            if now - self.rank_looked >= RANK_EVERY_NS:
                self.rank_looked = now
                self.rank = rank_of(self.env_rank)

    def first_own(self, domain: str) -> None:
        """At a range of ``domain`` ('' the default) while the program has opened none of its own: whether this is
        its first (not an automatic stage's); its own ranges then are its stages, the automatic ones removed."""
        if domain != AUTO_DOMAIN:
            with self.lock:
                if not self.own:
                    self.own = True
                    if self.auto is not None and self.s.domain is None:
                        self.auto.remove()

    def push(self, domain: str | None, name: str | None, payload: Any = None) -> None:
        # Every range of the program passes here; the common case (a range that is not a stage step) takes no lock:
        # it touches this thread's stack only; the lock guards what threads share (the step).
        if self.inside:
            return
        if self.gated:  # a late gate not yet passed: a range is a contact (its clock starts after the wait)
            self.pass_gate("a range")
        domain, name = domain or "", name or ""
        self.look_for_rank()
        if not self.own:
            self.first_own(domain)
        tid = get_ident()
        stack = self.stacks.get(tid)
        if stack is None:
            stack = self.stacks.setdefault(tid, [])
        depth = 0
        if stack:  # a top-level range, as nearly always, has none below it
            for entry in stack:
                if entry[0] == domain:
                    depth += 1
        s = self.s
        if s.domain is not None and self.step is None and domain == s.domain:  # a stage step?
            with self.lock:
                if self.step is None and (name in s.stages if s.stages is not None else depth == 0):
                    ordinal = self.counts.get(name, 0)
                    step = payload if isinstance(payload, int) and not isinstance(payload, bool) else ordinal
                    self.counts[name] = ordinal + 1
                    apart = ordinal in s.skip.get(name, ())  # warm-up (nsightflow.capture.read.warmup): followed only
                    self.step = (name, step, tid, len(stack), apart)  # its range's place in the stack, pushed below
                    if not apart:
                        self._begin(name, step)
        # every range starts once the hook's own work is done: none of it is part of the program's time
        began = perf_counter_ns()
        stack.append((domain, name, began))
        step_now = self.step
        if step_now is not None and step_now[2] == tid and step_now[3] == len(stack) - 1:
            self.t0 = began  # a step's host wall starts with its range, after the hook's work

    def pop(self, domain: str | None) -> None:
        if self.inside:
            return
        domain = domain or ""
        tid = get_ident()
        stack = self.stacks.get(tid)
        if not stack:
            return
        if stack[-1][0] == domain:  # the innermost range, as nearly always
            at = len(stack) - 1
        else:
            found = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == domain), None)
            if found is None:
                return
            at = found
        step_now = self.step
        s = self.s
        if step_now is not None and step_now[2] == tid and step_now[3] == at:  # only its own thread ends a step
            with self.lock:
                self._end()
        elif s.domain is None and not any(d == domain for d, *_ in stack[:at]):
            if domain != AUTO_DOMAIN or not self.own:
                step_clock.closing()  # stages not yet known: every top-level range ends synchronized
        stack.pop(at)

    def _begin(self, stage: str, step: int) -> None:
        if DEBUG:
            # One write, the line and its end: print() writes them apart, and another rank's line came between.
            sys.stderr.write(f"[nsightflow hook] pid {os.getpid()} {self.s.mode}: step {stage!r} {step}\n")
        if self.actions is None:  # the first step: the rank is known by now (torch.distributed initialised)
            from nsightflow.capture.inside import hook_actions

            self.rank = self.rank if self.rank is not None else rank_of()
            self.actions = self._own(hook_actions.for_mode, self.s, self.rank)
        if not self.actions.quiet:
            self._own(self.actions.begin, stage, step)

    def _end(self) -> None:
        """End the step: synchronized (step_clock), its actions ended, its wall kept."""
        assert self.step is not None
        stage = self.step[0]
        ended = step_clock.closing()
        if self.step[4]:  # a warm-up step: synchronized as in the timed run, nothing else
            self.step = None
            return
        if self.actions is not None and not self.actions.quiet:
            self._own(self.actions.end)
        walls = self.walls.get(stage)
        if walls is None:
            walls = self.walls[stage] = []
        walls.append((ended - self.t0) / 1e9)
        self.step = None
        if self.s.steps and all(self.counts.get(k, 0) >= n for k, n in self.s.steps.items()):
            self._own(self.actions.last_step)  # torch.profiler stops on the thread that started it
            if self.s.end_after_steps and one_process():
                self._own(self.finish)
                end_program("the window's last step has ended: this launch of the program stops here")

    def _own(self, fn: Any, *args: Any) -> Any:
        self.inside = True
        try:
            return fn(*args)
        finally:
            self.inside = False

    def ranges_record(self) -> list[list[Any]]:
        """The record's ranges: the timed run's (nsightflow.capture.inside.hook_timed); none in a profiled run."""
        return []

    def finish(self) -> None:
        """Write the process's record (at exit, or at a window's last step)."""
        from nsightflow import files

        record = self.record()
        if self.actions is not None:
            self.inside = True
            record.update(self.actions.finish())
        if self.s.out:
            files.write_json(record_path(self.s.out, os.getpid()), record)

    def record(self) -> dict[str, Any]:
        """The process's record."""
        ranges = self.ranges_record()
        return {
            "mode": self.s.mode,
            "pid": os.getpid(),
            "program_wall_s": time.perf_counter() - self.started,
            "epoch": [self.started_epoch, time.time()],  # the install and this record, on the wall clock
            "started_ns": self.started_ns,
            "steps": self.walls,  # a profiled run's (the timed run's steps are found from its ranges: discovery)
            "stage_order": list(self.walls),
            "ranges": ranges,
            "main_thread": threading.main_thread().ident,
            "compiled_graphs": step_clock.compiled_graphs(),
            "rank": self.rank if self.rank is not None else rank_of(),
            "device": device_of(),
            "autotuning": self.tuning.record() if self.tuning is not None and not self.tuning.replay else {},
            **(self.steps_by.inputs.record() if self.steps_by is not None and self.steps_by.inputs else {}),
        }


def rank_of(env: str | None = None) -> int | None:
    """This process's rank: ``RANK`` (torchrun; ``env``: its value as read before), else its initialised
    ``torch.distributed`` rank, else None."""
    env = os.environ.get("RANK", "") if env is None else env
    if env.isdigit():
        return int(env)
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (RuntimeError, ValueError):
        pass
    return None


def device_of() -> str:
    """The device this process computed on: ``cuda:N`` (its current CUDA device) or ``cpu``."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


DEBUG = bool(os.environ.get("NSIGHTFLOW_HOOK_DEBUG"))  # say each step the hook sees, on stderr
