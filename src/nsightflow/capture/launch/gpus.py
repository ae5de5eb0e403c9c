"""One GPU per concurrent capture: a device pool of file locks, unless a scheduler already chose the GPU.

Snakemake's ``resources: gpu=1`` with ``--resources gpu=K`` bounds how many captures run at once,
but does not say which device each gets. ``claim`` gives each job a free device index under an
exclusive ``flock`` and sets ``CUDA_VISIBLE_DEVICES`` for its child process; two jobs never share
a device, and a killed job's lock is released by the kernel. Where ``CUDA_VISIBLE_DEVICES`` is
already set (a cluster executor's allocation, or the user's choice) it is respected, not overridden.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

LOCK_DIR = Path(".snakemake") / "nsightflow-gpu-locks"


@contextmanager
def claim(
    n_devices: int | None = None,
    lock_dir: str | Path = LOCK_DIR,
    poll_s: float = 0.5,
    env: dict[str, Any] | None = None,
    want: int = 1,
) -> Iterator[tuple[dict[str, Any], str]]:
    """Yield (environment for the child, what was decided) while holding the locks of ``want`` devices (a job of
    several processes, one GPU per rank, asks for as many as it has ranks)."""
    env = dict(os.environ if env is None else env)
    if env.get("CUDA_VISIBLE_DEVICES", "") != "":
        yield env, f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} set by the scheduler or user: respected"
        return
    if n_devices is None:
        from nsightflow.capture.launch.backend import gpus

        n_devices = len(gpus())
    if n_devices <= want:
        yield env, f"{n_devices} GPU(s) visible, {want} wanted: no device choice to make"
        return
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        held = _take(lock_dir, n_devices, want)
        if held:
            ids = ",".join(str(i) for i, _ in held)
            try:
                env["CUDA_VISIBLE_DEVICES"] = ids
                what = f"device {ids} of {n_devices}" if want == 1 else f"devices {ids} of {n_devices}"
                yield env, f"{what} claimed (CUDA_VISIBLE_DEVICES={ids})"
            finally:
                for _, fh in held:
                    fcntl.flock(fh, fcntl.LOCK_UN)
                    fh.close()
            return
        time.sleep(poll_s)


def _take(lock_dir: Path, n_devices: int, want: int) -> list[tuple[int, IO[str]]]:
    """The locks of ``want`` free devices, all of them or none (a partial hold is released at once)."""
    held: list[tuple[int, IO[str]]] = []
    for i in range(n_devices):
        fh = open(lock_dir / f"gpu{i}.lock", "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        held.append((i, fh))
        if len(held) == want:
            return held
    for _, lock in held:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    return []
