"""How far one process of the serving loop keeps a pace of its own in the pace test's ring (tests/serving_ring.py),
pinned or not: the spread of the participants' summed iteration walls when every one of them runs alone.

Why: in the serving GPU test's ring (alone, timed, alone again; iterations in turns), the second alone process's
summed walls differed from the first's by −2.2%, −6.5% and −8.1% (docs/benchmarks.md, 2026-12-03), beyond the 5% the
test must resolve. Whether that is a process's own offset (its threads' CPUs, its memory) or the ring's position,
and whether pinning every participant to the same CPUs removes it, decides the test's design: how many processes
an arm it needs.

Each ring runs ``--of`` participants, all alone, ``--rings`` times, pinned to ``--cpus`` (a list such as ``0-3``) in
every other ring and unpinned in the others (the first unpinned). Each participant's summed walls against the
participants' mean, the CPUs its calls ended on, and the spread (SD) are printed; also the SD of 48-iteration blocks
(whether the offset holds over the run or comes in spells).

Usage (GPU host, project root, after ``. .gpu-bundle/activate.sh``; one run of the loop first fills the JIT cache):
``python3 benchmarks/serving_ring_spread.py --of 6 --rings 4 --cpus 0-3 -- <the serving workload's arguments>``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from serving_ring import run_ring  # noqa: E402


def cpu_list(text: str) -> set[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--of", type=int, default=6)
    p.add_argument("--rings", type=int, default=4)
    p.add_argument("--cpus", type=cpu_list, required=True)
    p.add_argument("--block", type=int, default=48)
    p.add_argument("workload", nargs=argparse.REMAINDER)
    a = p.parse_args()
    workload = a.workload[1:] if a.workload[:1] == ["--"] else a.workload
    for r in range(a.rings):
        cpus = a.cpus if r % 2 else None
        with tempfile.TemporaryDirectory(prefix="ring-spread-") as tmp:
            out, _ = run_ring(Path(tmp), workload, ["alone"] * a.of, timeout=900, cpus=cpus)
        walls = [o["passes"][0]["walls"]["iteration"] for o in out]
        sums = [sum(w) for w in walls]
        mean = statistics.fmean(sums)
        rel = [s / mean - 1 for s in sums]
        n = len(walls[0])
        blocks = []
        for b in range(0, n - a.block + 1, a.block):
            part = [sum(w[b : b + a.block]) for w in walls]
            m = statistics.fmean(part)
            blocks.append(statistics.stdev(x / m - 1 for x in part))
        pinned = "unpinned" if cpus is None else f"pinned to {sorted(cpus)}"
        print(f"ring {r} ({pinned}, {a.of} participants, {n} iterations): SD of the summed walls "
              f"{statistics.stdev(rel):.2%}; of {a.block}-iteration blocks (median over {len(blocks)}) "
              f"{statistics.median(blocks):.2%}")  # fmt: skip
        for i, (o, s, x) in enumerate(zip(out, sums, rel, strict=True)):
            top = Counter(o.get("cpus", [])).most_common(3)
            print(f"  participant {i}: {s:.3f} s ({x:+.2%}); CPUs (calls): {top}")
        print(f"  walls: {json.dumps([[round(w, 5) for w in arm] for arm in walls])}")


if __name__ == "__main__":
    main()
