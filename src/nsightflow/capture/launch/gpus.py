"""One GPU per concurrent capture: a device pool of file locks, unless a scheduler already chose the GPU.

Snakemake's ``resources: gpu=1`` with ``--resources gpu=K`` bounds how many captures run at once,
but does not say which device each gets. ``claim`` gives each job a free device index under an
exclusive ``flock`` and sets ``CUDA_VISIBLE_DEVICES`` for its child process; two jobs never share
a device, and a killed job's lock is released by the kernel. Where ``CUDA_VISIBLE_DEVICES`` is
already set (a cluster executor's allocation, or the user's choice) no device outside it is used: a job that wants
as many devices as it lists (or more) runs on it as it is; a job that wants fewer (the whole workflow run inside an
allocation of several GPUs, with ``--resources gpu=K``) claims its devices among those listed, by the same locks
(named by the listed device, so that every job of the run shares them), so two captures never share a device there
either.
"""

from __future__ import annotations

import fcntl
import os
import re
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
    given = env.get("CUDA_VISIBLE_DEVICES", "")
    listed = _listed(given)
    if given != "" and len(listed) <= want:
        _enough(want, len(listed), f"CUDA_VISIBLE_DEVICES={given} lists")
        yield env, f"CUDA_VISIBLE_DEVICES={given} set by the scheduler or user: respected"
        return
    if not listed:
        if n_devices is None:
            from nsightflow.capture.launch.backend import gpus

            n_devices = len(gpus())
        _enough(want, n_devices, "this machine has")
        if n_devices <= want:
            yield env, f"{n_devices} GPU(s) visible, {want} wanted: no device choice to make"
            return
        listed = [str(i) for i in range(n_devices)]
    among = f"CUDA_VISIBLE_DEVICES={given}" if given else str(len(listed))
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        held = _take(lock_dir, listed, want)
        if held:
            ids = ",".join(d for d, _ in held)
            try:
                env["CUDA_VISIBLE_DEVICES"] = ids
                what = f"device {ids} of {among}" if want == 1 else f"devices {ids} of {among}"
                yield env, f"{what} claimed (CUDA_VISIBLE_DEVICES={ids})"
            finally:
                for _, fh in held:
                    fcntl.flock(fh, fcntl.LOCK_UN)
                    fh.close()
            return
        time.sleep(poll_s)


def visible(env: dict[str, Any] | None = None) -> int:
    """How many devices a job here may use: those ``CUDA_VISIBLE_DEVICES`` lists where it is set, else every GPU
    nvidia-smi lists (which ignores that variable)."""
    given = dict(os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES", "")
    if given != "":
        return len(_listed(given))
    from nsightflow.capture.launch.backend import gpus

    return len(gpus())


def _listed(given: str) -> list[str]:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value names (indices or UUIDs), in its order."""
    return [d.strip() for d in given.split(",") if d.strip()]


def _enough(want: int, have: int, where: str) -> None:
    """Refuse, before anything starts, a job of ``want`` devices (one per rank) where only ``have`` (at least one) are
    there: its last ranks would fail on a device that does not exist. None at all is a CPU run: nothing to refuse."""
    if 0 < have < want:
        from nsightflow.errors import ConfigError

        raise ConfigError(
            f"the workload wants {want} GPUs (its config key gpus: one per rank) but {where} {have}: its rank {have} "
            f"would find no device (CUDA's 'invalid device ordinal'). Fix: run it where {want} GPUs are visible (an "
            f"allocation of {want}, or CUDA_VISIBLE_DEVICES naming {want}), or set gpus: {have} with ranks that share"
        )


def _take(lock_dir: Path, devices: list[str], want: int) -> list[tuple[str, IO[str]]]:
    """The locks of ``want`` free devices of ``devices`` (indices or UUIDs, as CUDA_VISIBLE_DEVICES names them), all
    of them or none (a partial hold is released at once)."""
    held: list[tuple[str, IO[str]]] = []
    for device in devices:
        fh = open(lock_dir / f"gpu{re.sub(r'[^A-Za-z0-9._-]', '_', device)}.lock", "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        held.append((device, fh))
        if len(held) == want:
            return held
    for _, lock in held:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    return []
