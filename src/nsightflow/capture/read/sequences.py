"""Launch sequences of two stage steps aligned launch by launch (capture mode 'differences': a step's launches that
stand in for another step's, nsightflow.capture.read.plan)."""

from __future__ import annotations

from difflib import SequenceMatcher

import pandas as pd

# A launch stands in for another of the same kernel and block whose grid has at most this many times more or fewer
# blocks: a decode iteration's batch changes its grids by up to 2x from one launch sequence to the next (the steps
# of one sequence already take each other's counters so), a prefill's grids are a hundred times a decode's.
GRID_SPAN = 2.0


def nearest_sequence(earlier: list[tuple[int, pd.DataFrame]], mine: pd.DataFrame) -> tuple[int, list[list[int]]]:
    """The earlier step whose launch sequence shares the most launches with ``mine`` (the latest among equals), and
    [seq, its seq] of each launch of ``mine`` aligned with a launch of the same kernel and block there whose grid is
    within GRID_SPAN of its own (difflib's matching blocks over the two sequences' kernels and blocks; each frame in
    launch order, with seq, mangled, grid and block)."""

    def keys(f: pd.DataFrame) -> list[str]:
        return (f["mangled"].astype(str) + "|" + f["block"].astype(str)).tolist()

    b, ours, our_blocks = keys(mine), mine["seq"].tolist(), _blocks(mine["grid"])
    best: tuple[int, list[list[int]]] = (earlier[-1][0], [])
    for step, launches in earlier:
        m = SequenceMatcher(None, keys(launches), b, autojunk=False)
        theirs, their_blocks = launches["seq"].tolist(), _blocks(launches["grid"])
        pairs = [
            [int(ours[j + k]), int(theirs[i + k])]
            for i, j, n in m.get_matching_blocks()
            for k in range(n)
            if our_blocks[j + k] <= GRID_SPAN * their_blocks[i + k]
            and their_blocks[i + k] <= GRID_SPAN * our_blocks[j + k]
        ]
        if len(pairs) >= len(best[1]):
            best = (step, pairs)
    return best


def _blocks(grids: pd.Series) -> list[int]:
    """Each grid's blocks (the product of its dimensions: ``(x, y, z)`` as the timeline writes it)."""
    out = []
    for g in grids.astype(str):
        n = 1
        for part in g.strip("()").split(","):
            n *= int(part)
        out.append(n)
    return out
