"""Communication kernels (NCCL's collectives and point-to-point copies): a class of their own in every table.

ncu never profiles them: replaying a collective on one rank while its peers have moved on deadlocks the job, and its
counters say nothing of the link it waits on. The capture's kernel filter leaves them out (:data:`NCU_FILTER`, a
negative look-ahead on the function name, as ncu 2025.3.1 reads it), the plan expects none, and the stage tables
give their time apart, with how much of it ran while the same rank's compute kernels did (:func:`overlapped`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# numpy and pandas are imported where used: ncu's command line (NCU_FILTER) is built before either is needed.

# NCCL's kernels: ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...), ncclKernel_..., and their 'void '-prefixed forms.
PATTERN = r"(?:^|[\s:])nccl"

# ncu's kernel filter that profiles every kernel but NCCL's (--kernel-name matches the function's base name).
NCU_FILTER = ["--kernel-name", "regex:^(?!nccl)"]

# NCCL's transports in ncu's launch of a job of several GPUs. nanoGPT under torchrun (DDP) hung in 2 of 3 ncu launches
# on two GPUs, in none of 6 with peer-to-peer off (docs/gpu-host.md). The explanation that fits (not proven): kernel
# replay saves the profiled rank's memory before a kernel's first pass and restores it before each next one, undoing
# a peer's writes into it meanwhile (NVLink peer-to-peer, NVLink SHARP), and both ranks then wait in the collective
# for ever. Without them NCCL moves data through shared host memory; the kernels ncu measures are the same (NCCL's
# are never profiled). The nsys launch keeps the program's own transports. A workload's env wins.
REPLAY_SAFE_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}


def is_comm(names: pd.Series) -> np.ndarray:
    """Whether each kernel (by its demangled name) is a communication kernel. The pattern runs once per distinct
    name (a timeline repeats a few hundred names over its launches)."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(names.astype(str))
    found = pd.Series(uniques).str.contains(PATTERN, case=False, regex=True).to_numpy(dtype=bool)
    return found[codes] if len(uniques) else np.zeros(len(names), dtype=bool)


def overlapped(starts: np.ndarray, ends: np.ndarray, busy_starts: np.ndarray, busy_ends: np.ndarray) -> np.ndarray:
    """For each interval [start, end], the time during which some busy interval ran too (busy intervals may
    overlap one another: their union counts once)."""
    import numpy as np

    u_s, u_e = _union(busy_starts, busy_ends)
    if not len(u_s):
        return np.zeros(len(starts), dtype="float64")
    before = np.concatenate([[0.0], np.cumsum((u_e - u_s).astype("float64"))])

    def covered(t: np.ndarray) -> np.ndarray:  # busy time up to t
        i = np.searchsorted(u_s, t, side="right") - 1
        j = np.clip(i, 0, None)
        part = np.clip(np.minimum(t, u_e[j]) - u_s[j], 0, None).astype("float64")
        return np.where(i >= 0, before[j] + part, 0.0)

    return covered(ends.astype("int64")) - covered(starts.astype("int64"))


def busy_ns(starts: np.ndarray, ends: np.ndarray) -> float:
    """The time some interval ran (ns): their union's length, what overlaps counted once."""
    import numpy as np

    u_s, u_e = _union(starts, ends)
    return float(np.sum(u_e - u_s, dtype="float64"))


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    if not len(starts):
        return starts.astype("int64"), ends.astype("int64")
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype("int64"), ends[order].astype("int64")
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)
