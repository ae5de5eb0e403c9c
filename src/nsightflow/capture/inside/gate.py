"""Two launches of a command side by side, never on the GPU together: the timed run and the profile run's start.

A command workload's timeline job needs two launches of the program: a *timed* one with no profiler (its steps' wall
times, and the stages discovered from its ranges) and the *probe* one under nsys (which must know the stages). Run
one after the other they cost two interpreter and ``import torch`` start-ups (about 6 s on the GPU host, where the
whole of a small program takes 5 to 6 s). So the job starts both at once, and the hook gates the probe launch:

- the probe process, once the hook is installed (``torch`` imported, to follow ``torch.cuda.nvtx``) and before the
  program's first line, says it is *ready* (a file beside the gate) and waits until the gate opens: the job writes the
  gate file, holding the stages the timed run found, once the timed run has ended. The program has touched no GPU by
  then, and runs from there exactly as alone;
- the timed process, at the same point, waits until the probe launch is ready (or has ended): none of its program
  shares the machine with the other launch's start-up (the other launch sleeps while it runs), and no wait falls
  inside a clock the program keeps itself (a serving loop's, started before its first step).

Under nsys (``HookSettings.gate_at`` ``"contact"``) that point is later: the program's first *contact* with what the
two launches share (:class:`Contacts`): its first CUDA initialisation through torch, a step or NVTX range, another
program started (a Python child loads the hook and stops at its own contact), a bound socket, ``torch.distributed``'s
process group, torchrun's launch, or the import of another GPU library. Both launches import the program's libraries
at once (on the GPU host the serving loop's ``import transformers`` and the model's classes took 6.8 to 10.4 s after
``import torch``, docs/benchmarks.md), and neither has touched the GPU, started a program or bound a port when it
waits. What the program does before that point is done
twice at the same time: it should be its imports and set-up, not writes to a file the other launch reads.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from nsightflow.capture.inside.after_import import patch_on_import
from nsightflow.capture.launch.children import alive

POLL_S = 0.005
READY_WAIT_S = 120.0  # the timed run goes on after this long should the other launch never get ready (a lock it waits
# on that this run holds): the two then overlap, and the job's log says so

# Imports that are a contact: libraries that reach the GPU by ways the hook does not follow. (Not torchrun's modules:
# transformers imports torch.distributed.elastic; its launcher's contact is launch_agent, below.)
CONTACT_IMPORTS = ("cupy", "numba.cuda", "jax", "pycuda", "tensorrt", "tensorflow")


def ready_path(gate: str | Path) -> Path:
    """The file a gated launch writes when it waits at the gate."""
    return Path(f"{gate}.ready")


def wait_ready(gate: str | Path, pid: int, timeout_s: float = READY_WAIT_S) -> bool:
    """Return once the gated launch (process ``pid``, the profiler that runs it) waits at ``gate``, or has ended
    (True), or after ``timeout_s`` (False)."""
    ready = ready_path(gate)
    deadline = time.monotonic() + timeout_s
    while not ready.exists() and alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def wait_open(gate: str | Path) -> dict[str, Any]:
    """Say this launch is ready, wait until the job opens the gate, and return what it wrote there."""
    gate = Path(gate)
    if not gate.exists():
        ready_path(gate).touch()  # no content: several processes of a job may say so at once
        while not gate.exists():
            time.sleep(POLL_S)
    return dict(json.loads(gate.read_text()))


def open_gate(gate: str | Path, content: dict[str, Any]) -> None:
    """Let the gated launch go on, with ``content`` (written atomically: a reader never sees half of it)."""
    from nsightflow import files

    files.write_json(gate, content)


# Programs the standard library runs for a short answer before a program touches anything (ctypes.util.find_library:
# ldconfig, gcc; platform: uname): not contacts.
QUERIES = frozenset({"ldconfig", "ldconfig.real", "gcc", "cc", "uname", "ld", "objdump"})


def _foreign(path: Any) -> bool:
    """Whether a child process of this executable is a contact: it runs neither Python (the hook is loaded there
    too) nor one of the standard library's queries."""
    if isinstance(path, bytes):
        path = path.decode(errors="replace")
    name = os.path.basename(str(path))
    return not (name.startswith("python") or os.path.realpath(str(path)) == os.path.realpath(sys.executable)) and (
        name not in QUERIES
    )


def _foreign_child(_popen: Any, args: Any, executable: Any, *_rest: Any, **_kw: Any) -> bool:
    """``subprocess.Popen._execute_child``'s call: a contact where it starts a foreign program (or a shell)."""
    if executable is None:  # the program of its command line (shell=True) or of its argv
        if isinstance(args, bytes):
            args = args.decode(errors="replace")
        first = args.split()[:1] if isinstance(args, str) else list(args)[:1]
        executable = first[0] if first else ""
    return _foreign(executable)


class Contacts:
    """Calls ``stop`` before the program's first contact with what a launch beside it shares (see the module's
    docstring); ``remove`` puts back what it wrapped."""

    def __init__(self, stop: Callable[[str], None]) -> None:
        self.stop = stop  # called with the contact's name
        self.wrapped: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, wrapper)
        self.lock = threading.Lock()
        self.removed = False  # past the gate: nothing more is wrapped (a contact during install passes it)

    def install(self) -> None:
        import socket
        import subprocess

        # A child process that runs Python loads the hook and stops at its own first contact (a forked one too, the
        # hook copied); another program's start is a contact, but for the standard library's short queries
        self._before(subprocess.Popen, "_execute_child", "a child process", when=_foreign_child)
        self._before(socket.socket, "bind", "a socket bound")
        for name in ("posix_spawn", "posix_spawnp"):
            self._before(os, name, "a child process", when=lambda path, *_a, **_k: _foreign(path))
        patches: dict[str, Callable[[ModuleType], None]] = {
            "torch.cuda": self._cuda,
            "torch.distributed": self._distributed,
            # torchrun's launcher: its rendezvous store binds a port before the ranks start
            "torch.distributed.launcher.api": lambda m: self._before(m, "launch_agent", "torchrun's launch"),
        }
        patches.update({name: functools.partial(self._imported, name) for name in CONTACT_IMPORTS})
        patch_on_import(patches)

    def _imported(self, name: str, _module: ModuleType) -> None:
        self.stop(f"import {name}")

    def remove(self) -> None:
        with self.lock:
            self.removed = True
            for owner, name, original, wrapper in reversed(self.wrapped):
                if getattr(owner, name, None) is wrapper:  # not where the program has put its own since
                    setattr(owner, name, original)
            self.wrapped.clear()

    def _before(
        self, owner: Any, name: str, contact: str, original: Any = None, when: Callable[..., bool] | None = None
    ) -> Any:
        """Wrap ``owner.name`` so that ``stop(contact)`` runs before it (where ``when`` says a call is a contact)."""
        original = original if original is not None else getattr(owner, name, None)
        if original is None:
            return None
        stop = self.stop

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if when is None or when(*args, **kwargs):
                stop(contact)
            return original(*args, **kwargs)

        with self.lock:
            if self.removed:
                return None
            setattr(owner, name, wrapper)
            self.wrapped.append((owner, name, original, wrapper))
        return wrapper

    def _cuda(self, cuda: ModuleType) -> None:
        """torch's CUDA initialisation: ``torch.cuda._lazy_init``, which torch's C++ calls by name on the module, and
        the same function where a ``torch`` module imported it (torch.cuda.memory, torch.cuda.random)."""
        original = getattr(cuda, "_lazy_init", None)
        if original is None:
            return
        contact = "torch's CUDA initialisation"
        self._before(cuda, "_lazy_init", contact, original)
        for name, module in list(sys.modules.items()):
            if name.startswith("torch.") and module is not cuda and getattr(module, "_lazy_init", None) is original:
                self._before(module, "_lazy_init", contact, original)

    def _distributed(self, dist: ModuleType) -> None:
        """``init_process_group`` (its store binds a port), as ``torch.distributed`` and its c10d module name it."""
        c10d = getattr(dist, "distributed_c10d", None)
        for owner in (dist, c10d):
            if owner is not None and hasattr(owner, "init_process_group"):
                self._before(owner, "init_process_group", "torch.distributed's process group")
