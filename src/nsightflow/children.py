"""Every child process dies with its job: profilers, the workload they launch, and their children.

A rule's child runs in a process group of its own (so that a timeout stops the profiler and the program
it launched together) and would therefore miss a Ctrl-C sent to the workflow's foreground group. So:
- the child is killed by the kernel if the job's process dies (``PR_SET_PDEATHSIG``), and the harness
  asks the same of its own parent (the profiler), so a workload never outlives the tool that ran it;
- while a child runs, SIGTERM and SIGHUP end the job like Ctrl-C does, and on any way out (timeout,
  interrupt, error) the child's whole process group is killed before the job ends.
Without these, an orphaned workload went on to write its trace into ``results/`` after the workflow exited.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing happens)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Stopped(BaseException):
    """The job was told to stop (SIGTERM or SIGHUP)."""


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped while the block runs (main thread only), as SIGINT raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run(
    argv: list[str],
    env: dict | None = None,
    timeout_s: float | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[str, int]:
    """Run ``argv`` in its own process group, output merged; (output, exit code). On a timeout raises
    subprocess.TimeoutExpired with the output so far; on any way out the whole group is killed first.
    ``on_line`` sees each line of output as it comes (progress), from a reader thread."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    lines: list[str] = []
    reader = None
    if on_line is not None:

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)
                try:
                    on_line(line)
                except Exception:  # progress is a courtesy: it never fails the run
                    pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
    try:
        with stop_signals():
            if reader is None:
                out, _ = proc.communicate(timeout=timeout_s)
            else:
                proc.wait(timeout=timeout_s)
                reader.join()
                out = "".join(lines)
    except BaseException as exc:
        kill_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            if reader is None:
                exc.output = proc.communicate()[0]
            else:
                reader.join(timeout=10)
                exc.output = "".join(lines)
        raise
    return out, proc.returncode


def kill_group(proc: subprocess.Popen) -> None:
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
