"""Memory per stage, as the program runs (the timed pass): the device memory torch's caching allocator held at its
peak during a stage's steps (allocated to tensors, and reserved from the driver), and the process's peak resident
memory (Linux's high-water mark, VmHWM, reset before each step). Read and reset outside each step's timing: host
calls of microseconds, no synchronization of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROC = Path("/proc/self")


def _rss_peak() -> float | None:
    """The process's peak resident memory since the last reset (bytes), or None where Linux does not say."""
    try:
        for line in (PROC / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024  # kB
    except OSError:
        return None
    return None


def _reset_rss_peak() -> bool:
    """Reset the peak to the current resident memory (``5`` to clear_refs, Linux 4.0 and later)."""
    try:
        (PROC / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


class StepMemory:
    """Peak memory of each stage over its steps: call ``start`` before a step and ``stop(stage)`` after it (the step
    synchronized); ``peaks`` maps each stage to its largest ``allocated`` and ``reserved`` device bytes (CUDA only)
    and ``rss`` host bytes (where Linux can reset its high-water mark)."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self.peaks: dict[str, dict[str, float]] = {}
        self._rss = False

    def _cuda(self) -> bool:
        return bool(self._torch.cuda.is_available() and self._torch.cuda.is_initialized())

    def start(self) -> None:
        if self._cuda():
            self._torch.cuda.reset_peak_memory_stats()
        self._rss = _reset_rss_peak()

    def stop(self, stage: str) -> None:
        seen: dict[str, Any] = {}
        if self._cuda():
            seen["allocated"] = float(self._torch.cuda.max_memory_allocated())
            seen["reserved"] = float(self._torch.cuda.max_memory_reserved())
        rss = _rss_peak() if self._rss else None
        if rss is not None:
            seen["rss"] = rss
        mine = self.peaks.setdefault(stage, {})
        for key, value in seen.items():
            mine[key] = max(mine.get(key, 0.0), value)
