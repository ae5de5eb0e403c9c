"""Every child process dies with its job: profilers, the workload they launch, and their children.

A rule's child runs in a process group of its own (so that a timeout stops the profiler and the program
it launched together) and would therefore miss a Ctrl-C sent to the workflow's foreground group. So:
- the child is killed by the kernel if the job's process dies (``PR_SET_PDEATHSIG``), and the harness
  asks the same of its own parent (the profiler), so a workload never outlives the tool that ran it;
- while a child runs, SIGTERM and SIGHUP end the job like Ctrl-C does, and on any way out (timeout,
  interrupt, error, success) the child's whole process group is killed before the job ends;
- the job is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process the workload starts and leaves behind,
  even in a session of its own, becomes the job's child when its parent ends, and is killed with the rest
  (``kill_descendants``); the job never waits on a pipe such a process still holds;
- the job watches the workflow (the nearest ``snakemake`` above it, ``watch_workflow``): when Snakemake dies,
  by ``kill -9`` too, the job kills what it started and exits before publishing anything.
Without these, an orphaned workload went on to write its trace into ``results/`` after the workflow exited.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing happens)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def become_subreaper() -> None:
    """Make this process the parent of every orphaned descendant (Linux), so that none escapes the job."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state letter) of a process, from /proc; None where it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19]), fields[0]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended and not yet reaped, does not)."""
    st = _stat(pid)
    return st is not None and st[2] not in ("Z", "X")


def command(pid: int) -> str:
    """A process's command line, as ps shows it (empty where it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(root: int | None = None, spare: frozenset[int] = frozenset()) -> list[int]:
    """Every live process below ``root`` (default: this one), children before their children, but the ``spare``
    ones and every process below them. A zombie (ended, only its reaping left) is not listed but still links its
    children: /proc is read file by file, and a process may be read before its parent ended and its parent after,
    its children not yet given to the subreaper."""
    root = os.getpid() if root is None else root
    parent, ended = {}, set()
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parent[int(entry.name)] = st[0]
                if st[2] in ("Z", "X"):
                    ended.add(int(entry.name))
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, ppid in parent.items():
        children[ppid].append(pid)
    out, todo = [], [pid for pid in children.get(root, []) if pid not in spare]
    while todo:
        pid = todo.pop(0)
        if pid not in ended:
            out.append(pid)
        todo += [c for c in children.get(pid, []) if c not in spare]
    return out


def kill_descendants(spare: frozenset[int] = frozenset(), settle: bool = True, settle_s: float = 0.2) -> list[str]:
    """SIGKILL every process below this one but ``spare`` and the processes below them (none may outlive the job; a
    spared process's children are its own: the ranks a launch held beside a run starts once let go), reap those
    that are its children; 'pid command' of each killed. With ``settle``, or once it killed any, it ends only when
    two scans ``settle_s`` apart find none: a process whose parent is being killed (by this job's other thread,
    say) is given to the subreaper a moment later, and one scan in between sees neither."""
    killed: dict[int, str] = {}
    quiet = 0
    for _ in range(50):  # a process may start another while we look
        found = descendants(spare=spare)
        if not found:
            quiet += 1
            if quiet == 2 or not (settle or killed):
                break
            time.sleep(settle_s)
            continue
        quiet = 0
        killed = {**_kill(found), **killed}
        deadline = time.time() + 2
        while time.time() < deadline and any(alive(pid) for pid in found):
            time.sleep(0.02)
        for pid in found:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass  # not this process's child: its own parent reaps it
    return [f"{pid} {cmd}" for pid, cmd in killed.items()]


def _kill(pids: list[int]) -> dict[int, str]:
    """SIGKILL ``pids``; the command of each killed."""
    killed = {}
    for pid in pids:
        cmd = command(pid)
        try:
            os.kill(pid, signal.SIGKILL)
            killed[pid] = cmd[:200]
        except ProcessLookupError:
            pass
    return killed


def workflow_pid() -> int | None:
    """The nearest process above this one that runs Snakemake (a job's workflow), or None."""
    pid = os.getppid()
    for _ in range(20):
        if pid <= 1:
            return None
        argv = command(pid).split()
        if any(Path(a).name == "snakemake" for a in argv[:3]):
            return pid
        st = _stat(pid)
        if st is None:
            return None
        pid = st[0]
    return None


def watch_workflow(on_death: Callable[[int], None], interval_s: float = 0.5) -> int | None:
    """Call ``on_death(pid)`` from a daemon thread when the workflow above this job ends (killed, even by
    SIGKILL, or hung up); returns its pid, or None where no Snakemake runs above (a script run by hand)."""
    pid = workflow_pid()
    if pid is None:
        return None
    started = _stat(pid)
    if started is None:
        return None
    watch_pid(pid, started[1], on_death, interval_s)
    return pid


def identity(pid: int | None = None) -> str:
    """'pid:start ticks' of a process (default: this one): it names that process, never a later one with its pid."""
    pid = os.getpid() if pid is None else pid
    st = _stat(pid)
    return f"{pid}:{st[1] if st else 0}"


def watch_pid(pid: int, started: int, on_death: Callable[[int], None], interval_s: float = 0.5) -> None:
    """Call ``on_death(pid)`` from a daemon thread once process ``pid``, started at ``started`` (clock ticks), has
    ended: gone, a zombie, or its pid reused."""

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            now = _stat(pid)
            if now is None or now[1] != started or now[2] == "Z":
                on_death(pid)
                return

    threading.Thread(target=watch, daemon=True, name="nsightflow-watch").start()


def die_with(ident: str) -> None:
    """SIGKILL this process once the process ``ident`` names ('pid:start ticks', see :func:`identity`) has ended,
    even by SIGKILL: a command's processes (a daemon it started, a rank whose launcher died) never outlive the job
    that launched it. A thread looks at /proc twice a second; nothing where ``ident`` is empty."""
    pid, _, started = ident.partition(":")
    if pid.isdigit() and started.isdigit():
        watch_pid(int(pid), int(started), lambda _: os.kill(os.getpid(), signal.SIGKILL))


class Stopped(BaseException):
    """The job was told to stop (SIGTERM or SIGHUP)."""


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped while the block runs (main thread only), as SIGINT raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


LIMIT_BYTES = 4 << 20  # of a tool's output, what a job keeps (Output) and writes to its log


class Output:
    """A child's output as the job keeps it: every line a profiler's diagnosis needs (ncu's ``==PROF==``,
    ``==WARNING==``, ``==ERROR==``, the harness's ``nsightflow:``, a traceback's end), and of the rest the first
    and last ``limit_bytes`` / 2, saying how much was left out: a workload printing 40 MB is neither held in
    memory nor written to the log whole."""

    KEEP = ("==PROF==", "==WARNING==", "==ERROR==", "nsightflow: ")

    def __init__(self, limit_bytes: int = LIMIT_BYTES) -> None:
        self.half = limit_bytes // 2
        self.head: list[str] = []
        self.head_bytes = 0
        self.tail: collections.deque[str] = collections.deque()
        self.tail_bytes = 0
        self.dropped = 0

    def add(self, line: str) -> None:
        if self.head_bytes + len(line) <= self.half:
            self.head.append(line)
            self.head_bytes += len(line)
            return
        self.tail.append(line)
        self.tail_bytes += len(line)
        while self.tail_bytes > self.half and len(self.tail) > 1:
            old = self.tail.popleft()
            self.tail_bytes -= len(old)
            if old.startswith(self.KEEP):
                self.head.append(old)  # kept, out of order only relative to dropped lines
            else:
                self.dropped += len(old)

    def text(self) -> str:
        gap = f"[nsightflow] {self.dropped} bytes of output left out here (the log keeps its start and end)\n"
        return "".join(self.head) + (gap if self.dropped else "") + "".join(self.tail)


def run(
    argv: list[str],
    env: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    on_line: Callable[[str], None] | None = None,
    cwd: str | None = None,
    beside: Callable[[int], None] | None = None,
    nested: bool = False,
) -> tuple[str, int]:
    """Run ``argv`` (in ``cwd``) in its own process group, output merged; (output, exit code). On a timeout raises
    subprocess.TimeoutExpired with the output so far. On any way out, success too, the whole group and every
    process the child left behind are killed (their names end the output), and the job never waits on a pipe
    a left-behind process holds. ``on_line`` sees each line of output as it comes (progress), from a reader thread.

    ``beside(pid)`` runs in this thread while the child (process ``pid``) runs: another run, ``nested``, whose
    success kills only its own group (what it left behind is the outer run's to kill: a sweep of the job's
    processes now would kill the outer child's) and whose failure kills its group and what runs below it.
    """
    become_subreaper()
    earlier = frozenset(descendants())  # the caller's own other children are not this run's to kill
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    output = Output()

    def read() -> None:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            output.add(line)
            if on_line is not None:
                try:
                    on_line(line)
                except Exception:  # progress is a courtesy: it never fails the run
                    pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    try:
        with stop_signals():
            if beside is not None:
                beside(proc.pid)
            left_s = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))
            proc.wait(timeout=left_s)
    except BaseException as exc:
        below = descendants(proc.pid) if nested else []  # its ranks in sessions of their own, while they are its
        kill_group(proc)
        killed = [f"{pid} {cmd}" for pid, cmd in _kill(below).items()] if nested else kill_descendants(earlier)
        said = f"killed with the tool: {'; '.join(killed)[:2000] or 'no process left below it'}"
        vars(exc)["__notes__"] = [*getattr(exc, "__notes__", []), said]  # BaseException.add_note, before 3.11 too
        reader.join(timeout=10)
        if isinstance(exc, subprocess.TimeoutExpired):
            exc.output = output.text()
        raise
    # the program's group and anything it started elsewhere, named in the log (it ended: nothing is being killed now)
    left = [] if nested else kill_descendants(earlier, settle=False)
    kill_group(proc)
    reader.join(timeout=10)
    out = output.text()
    if left:
        out += (
            f"\n[nsightflow] the program left {len(left)} process(es) running when it ended; they were killed, as "
            f"every process a job starts ends with it: {'; '.join(left)[:1000]}\n"
        )
    return out, proc.returncode


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child's process group (the profiler and the program it launched) and reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def describe_exit(code: int) -> str:
    """'exited with 2', or 'was killed by SIGSEGV' for a negative return code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"
