"""Two runs compared: per stage (time, utilisation, bound) and per kernel (launches and GPU time: added, removed,
changed). Before/after an optimisation, one machine against another; pure functions over the runs' tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

STAGE_NUMBERS = ["wall_ms", "gpu_busy_ms", "mfu_busy", "hfu_busy", "dram_bw_util_busy", "bw_util_busy_model"]


def stage_diff(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """One row per stage of either run: each number before and after (``<col>_before``, ``<col>_after``), the change
    of wall and busy time (after / before − 1), the bound before and after, and whether the stage is in both."""
    keep = ["stage", *[c for c in STAGE_NUMBERS if c in before.columns or c in after.columns], "bound"]
    a = before.reindex(columns=keep)
    b = after.reindex(columns=keep)
    out = a.merge(b, on="stage", how="outer", suffixes=("_before", "_after"), indicator=True, sort=False)
    out["presence"] = out.pop("_merge").map({"both": "both", "left_only": "removed", "right_only": "added"})
    for col in ("wall_ms", "gpu_busy_ms"):
        out[f"{col}_change"] = out[f"{col}_after"] / out[f"{col}_before"] - 1
    order = list(dict.fromkeys([*before["stage"], *after["stage"]]))
    return out.set_index("stage").loc[order].reset_index()


def kernel_diff(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """One row per (stage, kernel) of either run: launches and GPU time before and after, the time's change, and its
    status (added, removed, changed, same), largest changes of time first."""
    cols = ["stage", "kernel", "instances", "total_ns"]
    a = before[cols].groupby(["stage", "kernel"], as_index=False, sort=False).sum()
    b = after[cols].groupby(["stage", "kernel"], as_index=False, sort=False).sum()
    out = a.merge(b, on=["stage", "kernel"], how="outer", suffixes=("_before", "_after"), indicator=True)
    t0, t1 = out["total_ns_before"].fillna(0.0), out["total_ns_after"].fillna(0.0)
    out["delta_ns"] = t1 - t0
    same = (out["instances_before"] == out["instances_after"]) & np.isclose(t0, t1, rtol=0.02)
    out["status"] = np.select(
        [out["_merge"] == "left_only", out["_merge"] == "right_only", same], ["removed", "added", "same"], "changed"
    )
    out = out.drop(columns="_merge")
    return out.reindex(out["delta_ns"].abs().sort_values(ascending=False).index).reset_index(drop=True)


def summary_lines(stages: pd.DataFrame) -> list[str]:
    """One sentence per stage: wall and busy time before → after, and the bound before → after."""
    lines = []
    for _, r in stages.iterrows():
        if r["presence"] != "both":
            lines.append(f"{r['stage']}: only {'after' if r['presence'] == 'added' else 'before'}")
            continue
        change = r["wall_ms_change"]
        bound = (
            f"{r['bound_before']} → {r['bound_after']}" if r["bound_before"] != r["bound_after"] else r["bound_after"]
        )
        lines.append(
            f"{r['stage']}: wall {r['wall_ms_before']:.3g} → {r['wall_ms_after']:.3g} ms ({change:+.1%}), busy "
            f"{r['gpu_busy_ms_before']:.3g} → {r['gpu_busy_ms_after']:.3g} ms, bound {bound}"
        )
    return lines
