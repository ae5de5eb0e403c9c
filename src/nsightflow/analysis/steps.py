"""A command's stages step by step (``steps.csv``): each step's wall in the program's timed run, its model FLOPs and
bytes from the count (steady steps), its MFU and bandwidth on wall, its GPU busy time and ncu's numbers (nsys and
ncu: measured where sampled, else scaled launch by launch as the stages' are), and its batch mix (the workload's
``step_inputs``); and the steady steps grouped by mix, for a serving loop whose iterations differ by what they batch
(prefill-heavy, mixed, decode-only by batch size). A callable's harness repeats identical steps: its table is empty."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from nsightflow import columns
from nsightflow.mixes import inputs_text, mix_label
from nsightflow.records import Manifest, Peaks, StageCount

MEASURED = ["flops_tensor", "dram_bytes"]  # ncu's counters a step's row sums (nsightflow.analysis.metrics)


def step_measured(values: pd.DataFrame) -> pd.DataFrame:
    """Per (stage, step) of the timeline: GPU busy time and ncu's tensor FLOPs and DRAM bytes over its launches
    (``values``: nsightflow.analysis.metrics.launch_values, unsampled steps scaled from the sampled ones); a counter
    is NaN for a step where any launch lacks it; ``stood_in_ns``, the busy time of its launches whose counters are
    another call's (launch_values ``stood_in``)."""
    if values.empty:
        return pd.DataFrame(columns=["stage", "step", "busy_ns", *MEASURED, "stood_in_ns"])
    g = values.groupby(["stage", "step"], sort=False)
    out = g["duration_ns"].sum().rename("busy_ns").to_frame()
    for c in MEASURED:
        out[c] = g[c].sum(min_count=1).where(g[c].count() == g.size())
    stood = values["duration_ns"].where(values["stood_in"], 0.0)
    out["stood_in_ns"] = stood.groupby([values["stage"], values["step"]], sort=False).sum()
    return out.reset_index()


def stood_in_shares(per_step: pd.DataFrame) -> dict[str, float]:
    """Per stage (of :func:`step_measured`), the share of its GPU time whose counters are another call's: 0 where
    every launch has its own call's or a launch no call identifies stands for it."""
    if per_step.empty:
        return {}
    g = per_step.groupby("stage", sort=False)
    busy = g["busy_ns"].sum()
    return {str(k): float(v) for k, v in (g["stood_in_ns"].sum() / busy.where(busy > 0)).fillna(0.0).items()}


def _per_step(values: list[float] | None, steady: int) -> list[float]:
    """A stage's per-step counts for its ``steady`` steps, NaN each where the count has none or another number of
    steps (a count that cannot be matched to its steps is not spread over them)."""
    if values is None or len(values) != steady:
        return [math.nan] * steady
    return [float(v) for v in values]


def _ms(seconds: float | None) -> float:
    return math.nan if seconds is None else seconds * 1e3


def stage_paces(manifest: Manifest) -> dict[str, float]:
    """Each stage's median pace (s) over its steady steps that have one (a command's: Manifest.every_pace_s)."""
    apart = {(str(w["stage"]), int(w["step"])) for w in manifest.warmup_steps}
    out = {}
    for stage, paces in (manifest.every_pace_s or {}).items():
        mine = [p for i, p in enumerate(paces) if p is not None and (stage, i) not in apart]
        if mine:
            out[stage] = float(np.median(mine))
    return out


def step_table(
    manifest: Manifest, analytic: dict[str, StageCount], pk: Peaks | None, measured: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per step of each stage of a command's timed run (``manifest.every_wall_s``), in order; with
    ``measured`` (:func:`step_measured` of the nsys timeline, whose steps are numbered as the timed run's), each
    profiled step's busy time and ncu's numbers."""
    rows: list[dict[str, Any]] = []
    by_step = measured.set_index(["stage", "step"]) if measured is not None and len(measured) else None
    apart = {(str(w["stage"]), int(w["step"])) for w in manifest.warmup_steps}
    compute = pk.compute if pk is not None else math.nan
    peak_dram = pk.dram if pk is not None else math.nan
    for stage, walls in (manifest.every_wall_s or {}).items():
        steady = [i for i in range(len(walls)) if (stage, i) not in apart]
        count = analytic.get(stage, StageCount())
        flops = dict(zip(steady, _per_step(count.step_flops, len(steady)), strict=True))
        moved = dict(zip(steady, _per_step(count.step_bytes, len(steady)), strict=True))
        inputs = manifest.step_inputs.get(stage)
        said = inputs is not None
        paces = (manifest.every_pace_s or {}).get(stage) or []
        for i, wall in enumerate(walls):
            f, b = flops.get(i, math.nan), moved.get(i, math.nan)
            summary = inputs[i] if inputs is not None and i < len(inputs) else None
            m = by_step.loc[(stage, i)] if by_step is not None and (stage, i) in by_step.index else None
            busy = float(m["busy_ns"]) * 1e-9 if m is not None else math.nan
            dram = float(m["dram_bytes"]) if m is not None else math.nan
            rows.append(
                {
                    "stage": stage,
                    "step": i,
                    "steady": i in flops,
                    "wall_ms": wall * 1e3,
                    "pace_ms": _ms(paces[i] if i < len(paces) else None),
                    "flops_model": f,
                    "bytes_model": b,
                    "mfu_wall": f / (wall * compute) if wall > 0 else math.nan,
                    "bw_util_wall_model": b / (wall * peak_dram) if wall > 0 else math.nan,
                    "busy_ms": busy * 1e3,
                    "flops_tensor_measured": float(m["flops_tensor"]) if m is not None else math.nan,
                    "dram_bytes_measured": dram,
                    "dram_bw_util_busy": dram / (busy * peak_dram) if busy > 0 else math.nan,
                    "mix": mix_label(summary, said),
                    "inputs": inputs_text(summary, said),
                }
            )
    return pd.DataFrame(rows, columns=columns.names("steps"))


def mix_table(steps: pd.DataFrame) -> pd.DataFrame:
    """The steady steps grouped by stage and batch mix: how many, their median and total wall, model FLOPs a step,
    and MFU and bandwidth on their summed wall (sums over sums, so a long step weighs as its time does)."""
    s = steps[steps["steady"].astype(bool) & (steps["mix"].astype(str) != "")]
    out = []
    for (stage, mix), g in s.groupby(["stage", "mix"], sort=False):
        wall = float(g["wall_ms"].sum())
        busy = float(g["busy_ms"].sum(min_count=len(g)))  # NaN unless every step was profiled
        out.append(
            {
                "stage": stage,
                "mix": mix,
                "steps": len(g),
                "wall_ms_median": float(g["wall_ms"].median()),
                "pace_ms_median": float(g["pace_ms"].median()),
                "wall_ms_total": wall,
                "flops_model_per_step": float(g["flops_model"].mean()),
                "mfu_wall": float((g["mfu_wall"] * g["wall_ms"]).sum(min_count=len(g)) / wall) if wall else np.nan,
                "bw_util_wall_model": float((g["bw_util_wall_model"] * g["wall_ms"]).sum(min_count=len(g)) / wall)
                if wall
                else np.nan,
                "busy_ms_total": busy,
                "flops_tensor_measured_per_step": float(g["flops_tensor_measured"].mean(skipna=False)),
                "dram_bw_util_busy": float((g["dram_bw_util_busy"] * g["busy_ms"]).sum(min_count=len(g)) / busy)
                if busy > 0
                else np.nan,
            }
        )
    return pd.DataFrame(out, columns=columns.names("mixes"))
