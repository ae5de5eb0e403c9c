"""The report's focus per stage: its top-N kernels, the fewest that cover a share of its GPU time (every
kernel is captured regardless; this only chooses what the report puts first)."""

from __future__ import annotations

import pandas as pd

from nsightflow.errors import ConfigError


def select_kernels(kernels: pd.DataFrame, top_n: int | None = None, coverage: float | None = None) -> pd.DataFrame:
    """Per stage, the kernels to capture, by GPU time.

    ``top_n`` alone: the N longest. ``coverage`` alone: the fewest that cover that share of
    the stage's GPU time. Both: the fewest covering ``coverage``, at most ``top_n`` (the cap
    bounds capture cost; the covered share says what the cap left out).
    Returns the chosen rows of ``kernels`` with rank, share and cumulative_share columns.
    """
    if top_n is None and coverage is None:
        raise ConfigError("select_kernels needs top_n, coverage or both")
    if top_n is not None and top_n < 1:
        raise ConfigError(f"top_n must be at least 1, got {top_n}")
    if coverage is not None and not 0 < coverage <= 1:
        raise ConfigError(f"coverage must be in (0, 1], got {coverage}")
    chosen = []
    for _, group in kernels.groupby("stage", sort=True):
        g = group.sort_values(["total_ns", "kernel"], ascending=[False, True]).reset_index(drop=True)
        total = g["total_ns"].sum()
        g["rank"] = range(1, len(g) + 1)
        g["share"] = g["total_ns"] / total if total > 0 else 0.0
        g["cumulative_share"] = g["share"].cumsum()
        n = len(g)
        if coverage is not None:
            # Fewest kernels whose cumulative share reaches coverage (float tolerance for coverage=1).
            reached = g.index[g["cumulative_share"] >= coverage - 1e-12]
            n = int(reached[0]) + 1 if len(reached) else len(g)
        if top_n is not None:
            n = min(n, top_n)
        chosen.append(g.head(n))
    if not chosen:
        return kernels.assign(rank=[], share=[], cumulative_share=[])
    return pd.concat(chosen, ignore_index=True)
