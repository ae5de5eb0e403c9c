"""From ncu counters and the nsys timeline to FLOPs, bytes, MFU and bandwidth utilisation.

Rules this module keeps:
- counts (FLOPs, bytes) come from ncu and do not depend on clocks; times come from the nsys
  timeline, because ncu locks clocks and flushes caches by default;
- profiled launches stand for their class (same kernel, grid, block, shared memory): a class's
  mean counters are scaled by its launches in the timeline, and the share of the stage's GPU time
  whose classes were profiled (coverage) is stated beside every total;
- peaks come from the capture's own ``peak_sustained`` metrics times the clock measured in the
  same result where ncu has them (dense tensor rate: the aggregate bf16 counter's peak is the
  sparse rate), else from a datasheet table keyed by device name; each peak names its source.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from nsightflow.analysis import experts, uncounted
from nsightflow.capture.read.attribution import call_classes
from nsightflow.capture.read.comm import is_comm
from nsightflow.errors import InputError
from nsightflow.formulas import CLASSES, GROUPED_GEMMS, op_class
from nsightflow.records import Peaks, StageCount

COUNTERS = ["flops", "flops_tensor", "dram_bytes", "l2_bytes", "l1_bytes"]
# What a launch needs to count as measured (coverage): all FLOPs ('flops') include the SASS counts of non-tensor
# FLOPs, which a capture may leave out (nsightflow.ncu_metrics.non_tensor_flops); then their totals are NaN.
COVERED = ["flops_tensor", "dram_bytes", "l2_bytes", "l1_bytes"]


def non_tensor_collected(flops: pd.Series) -> bool:
    """Whether a run's capture collected the non-tensor FLOPs: then some launch (or kernel) has all its FLOPs.
    Without them every 'flops' is NaN, and rates, coverage and the class split use the tensor FLOPs."""
    return bool(flops.notna().any())


def strict(g: Any, how: str) -> pd.DataFrame:
    """Each group's mean or sum (``how``) of each column, NaN where any member has no number: never a partial
    result. Vectorized (a Python function per group took 0.8 s over the 10,000 classes of an 8B-shaped decode)."""
    got = getattr(g, how)()
    return got.where(g.count().eq(g.size(), axis=0))


def launch_values(
    ranged: pd.DataFrame, matched: pd.DataFrame, chosen: set[tuple[str, int]], by_call: bool = True
) -> pd.DataFrame:
    """Counters of every launch of the ranged pass, measured or scaled.

    A launch takes, in order: the mean of its class's profiled launches in its own step (all of them are
    identical; see nsightflow.capture.read.plan); with ``by_call``, where its class is an operator call
    (nsightflow.capture.read.attribution.call_classes), the mean of that call's profiled launches in any step of its
    stage (the same call does the same work in every step: a training loop's iterations, a decode step's GEMMs);
    outside the ``chosen`` steps, the mean, over the chosen steps with the same structure (launch sequence), of
    the launch at its position: decode steps repeat their kernels while the work of some (attention over a
    growing cache, a replayed CUDA graph) changes. NaN where nothing measured stands for it: never a zero.
    ``by_call`` is off for captures of every launch (calls whose work depends on data, e.g. MoE routing).
    ``stood_in``: an operator call profiled in no step (other shapes than every profiled launch's: a serving
    iteration's batch) that took the counters of another call's launch at its position: an estimate.
    """
    cols = ["stage", "step", "seq", "class_key", "structure", "kernel", "duration_ns"]
    out = ranged[cols].copy()
    out["stood_in"] = False
    if matched.empty:
        for c in COUNTERS:
            out[c] = np.nan
        out["profiled"] = 0
        return out
    g = matched.groupby(["stage", "step", "class_key"])
    reps = strict(g[COUNTERS], "mean").join(g.size().rename("profiled"))
    out = out.merge(reps, left_on=["stage", "step", "class_key"], right_index=True, how="left")
    out["profiled"] = out["profiled"].fillna(0).astype("int64")
    calls = pd.Series(call_classes(ranged), index=ranged.index)
    if by_call:
        per_call = strict(out[calls & (out["profiled"] > 0)].groupby(["stage", "class_key"])[COUNTERS], "mean")
        _fill(out, calls & (out["profiled"] == 0), per_call, ["stage", "class_key"])
    win = pd.Series(pd.MultiIndex.from_frame(out[["stage", "step"]]).isin(list(chosen)), index=out.index)
    slots = strict(out[win].groupby(["stage", "structure", "seq"])[COUNTERS], "mean")
    by_position = ~win & out[COUNTERS].isna().all(axis=1)
    _fill(out, by_position, slots, ["stage", "structure", "seq"])
    out["stood_in"] = (by_position & calls & out[COUNTERS].notna().any(axis=1)).to_numpy()
    return out


def _fill(out: pd.DataFrame, rows: pd.Series, table: pd.DataFrame, keys: list[str]) -> None:
    """Counters of ``rows`` (a mask over ``out``) from ``table``, indexed by ``keys``; NaN where it has no entry."""
    if not rows.any() or table.empty:
        return
    looked = out.loc[rows, keys].merge(table, left_on=keys, right_index=True, how="left")
    out.loc[rows, COUNTERS] = looked[COUNTERS].to_numpy()


def _add_counter_totals(out: pd.DataFrame, g: Any) -> None:
    """Each counter's total per group (NaN when any member has no number, never a partial sum) and per launch."""
    totals = strict(g[COUNTERS], "sum")
    for c in COUNTERS:
        out[c] = totals[c].to_numpy()
        out[f"{c}_per_launch"] = out[c] / out["instances"]


def class_summary(values: pd.DataFrame) -> pd.DataFrame:
    """Per (stage, class of identical launches): launches, GPU time, profiled launches and counter totals
    (NaN where any of its launches has no number)."""
    g = values.groupby(["stage", "class_key"], sort=False)
    out = g.agg(
        kernel=("kernel", "first"),
        instances=("duration_ns", "size"),
        total_ns=("duration_ns", "sum"),
    ).reset_index()
    # Each launch row carries its class's profiled launches in its step: counted once per step, not per launch.
    once = values.drop_duplicates(["stage", "step", "class_key"]).groupby(["stage", "class_key"])["profiled"].sum()
    out["profiled"] = [int(once.get((st, k), 0)) for st, k in zip(out["stage"], out["class_key"], strict=True)]
    out["total_ns"] = out["total_ns"].astype("float64")
    _add_counter_totals(out, g)
    return out


def kernel_summary(classes: pd.DataFrame, ranges: pd.DataFrame, pk: Peaks) -> pd.DataFrame:
    """Per (stage, kernel): launches, time and counters summed over its classes; per-launch means, intensity,
    achieved rates and share of peak. A kernel with any class unmeasured has no counters (NaN)."""
    n_ranges = ranges.groupby("stage").size().rename("range_instances")
    g = classes.groupby(["stage", "kernel"], sort=False)
    out = g.agg(
        instances=("instances", "sum"),
        total_ns=("total_ns", "sum"),
        classes=("class_key", "size"),
        sampled_launches=("profiled", "sum"),
    ).reset_index()
    _add_counter_totals(out, g)
    out = out.merge(n_ranges, left_on="stage", right_index=True, how="left")
    out["launches_per_range"] = out["instances"] / out["range_instances"]
    return with_rates(out, pk)


def with_rates(out: pd.DataFrame, pk: Peaks) -> pd.DataFrame:
    """Average time per launch, intensity, achieved FLOP/s and bytes/s, and their share of the peaks."""
    out["avg_ns"] = out["total_ns"] / out["instances"]
    if "flops_per_launch" not in out:
        return out
    flops = out["flops_per_launch"]
    if not non_tensor_collected(flops) and "flops_tensor_per_launch" in out:
        # Non-tensor FLOPs not collected: rates from the tensor pipes' FLOPs, and none for a kernel without
        # tensor work (its FLOPs are not known, not zero).
        flops = out["flops_tensor_per_launch"].where(out["flops_tensor_per_launch"] > 0)
    out["arithmetic_intensity"] = flops / out["dram_bytes_per_launch"].replace(0, np.nan)
    out["achieved_flops_per_s"] = flops / (out["avg_ns"] * 1e-9)
    out["achieved_dram_bytes_per_s"] = out["dram_bytes_per_launch"] / (out["avg_ns"] * 1e-9)
    out["compute_utilisation"] = out["achieved_flops_per_s"] / pk.compute
    out["dram_utilisation"] = out["achieved_dram_bytes_per_s"] / pk.dram
    return out


OP_CLASSES = [*CLASSES, "unattributed"]


def launch_ops(class_keys: pd.Series) -> pd.Series:
    """The name of the operator that launched each kernel (``mm``), read from its class key
    ('mm#<digest>#<ordinal>|<kernel key>', see nsightflow.capture.read.attribution); '' where no operator is known:
    launched between operators (CUDA-graph replays, compiled graphs' own kernels, extensions that bypass the
    dispatcher) or in a step the probe pass has no twin of."""
    # A run's launches share a few thousand keys (85,312 launches, 2,172 keys in the serving GPU test): each key read
    # once, not each launch.
    codes, keys = pd.factorize(class_keys.astype(str))
    head = pd.Series(keys, dtype=object).str.split("|", n=1).str[0]
    ops = head.str.split("#", n=1).str[0]
    known = head.str.contains("#", regex=False) & (ops != "gap")
    return pd.Series(ops.where(known, "").to_numpy(dtype=object)[codes], index=class_keys.index, dtype=object)


def launch_op_classes(class_keys: pd.Series) -> pd.Series:
    """The class (nsightflow.formulas.op_class) of the operator that launched each kernel (launch_ops);
    'unattributed' where no operator is known."""
    ops = launch_ops(class_keys)
    return pd.Series(np.where(ops != "", ops.map(op_class), "unattributed"), index=class_keys.index)


def stage_measured(values: pd.DataFrame) -> pd.DataFrame:
    """Per stage: GPU busy time, the time of launches with counters (coverage), their counter totals (FLOPs
    also by the class of the operator that launched each kernel), the launches profiled and the classes
    they represent."""
    rows = []
    # Non-tensor FLOPs collected: then a launch without them is not covered, and classes split all FLOPs.
    collected = non_tensor_collected(values["flops"])
    required = COVERED + (["flops"] if collected else [])
    basis = "flops" if collected else "flops_tensor"
    for stage, g in values.groupby("stage", sort=False):
        ok = g[g[required].notna().all(axis=1)]
        prof = g[g["profiled"] > 0].drop_duplicates(["step", "class_key"])
        comm = is_comm(g["kernel"])
        row: dict[str, Any] = {
            "stage": stage,
            "busy_ns": float(g["duration_ns"].sum()),
            "comm_ns": float(g["duration_ns"][comm].sum()),
            "covered_ns": float(ok["duration_ns"].sum()),
            "profiled": int(prof["profiled"].sum()),
            "classes": int(len(prof)),
        }
        for c in COUNTERS:
            row[c] = float(ok[c].sum(skipna=False)) if len(ok) else np.nan
        op = launch_op_classes(ok["class_key"])
        by_op = ok.groupby(op)[basis].sum() if len(ok) else pd.Series(dtype=float)
        # No launch has a known operator (captures made without the probe): the split is unknown, not zero.
        split = len(ok) > 0 and bool((op != "unattributed").any())
        for c in OP_CLASSES:
            row[f"flops_{c}"] = float(by_op.get(c, 0.0)) if split or (c == "unattributed" and len(ok)) else np.nan
        names = launch_ops(ok["class_key"])
        row["tensor_by_op"] = ok[names != ""].groupby(names)["flops_tensor"].sum().to_dict() if split else {}
        row.update(expert_time(g, ok))
        rows.append(row)
    return pd.DataFrame(rows)


def expert_time(launches: pd.DataFrame, ok: pd.DataFrame) -> dict[str, float]:
    """A stage's grouped GEMM launches (an MoE's experts, nsightflow.formulas.GROUPED_GEMMS): their time
    (``expert_ns``) and tensor FLOPs (``expert_flops``, NaN unless every one has counters); NaN where it has none."""
    experts = launch_ops(launches["class_key"]).isin(GROUPED_GEMMS)
    if not experts.any():
        return {"expert_ns": np.nan, "expert_flops": np.nan}
    mine = ok[launch_ops(ok["class_key"]).isin(GROUPED_GEMMS)]
    flops = float(mine["flops_tensor"].sum()) if len(mine) == int(experts.sum()) else np.nan
    return {"expert_ns": float(launches["duration_ns"][experts].sum()), "expert_flops": flops}


def with_program_wall(stages: pd.DataFrame, program_wall_s: dict[str, list[float]] | None, source: str) -> pd.DataFrame:
    """Stage wall times as the program runs: ``wall_ns`` from the harness's timed pass (no profiler collecting),
    the profiled ranges' own in ``wall_profiled_ns``. A profiler slows launch-bound code (nsys about 30 µs a
    launch), so utilisations on wall time divide by the program's. Without a timed pass (captures made
    elsewhere) the ranges' times stay, and ``wall_profiled_ns`` is empty.

    The timed pass must describe the same stages and steps as the ranges (``source``: the file it came from)."""
    out = stages.copy()
    out["wall_profiled_ns"] = np.nan
    if not program_wall_s:
        return out
    ranged = dict(zip(out["stage"], out["range_instances"], strict=True))
    timed = {k: len(v) for k, v in program_wall_s.items()}
    if ranged != timed:
        raise InputError(
            f"{source}: the timed pass ran steps {timed} (stage: steps), the profiled ranges {ranged}: they describe "
            "different runs; rerun the profiling rule (delete its outputs)"
        )
    bad = {k: v for k, v in program_wall_s.items() if not all(np.isfinite(x) and x >= 0 for x in v)}
    if bad:
        raise InputError(f"{source}: step wall times {bad} are not durations; rerun the profiling rule")
    out["wall_profiled_ns"] = out["wall_ns"]
    out["wall_ns"] = [float(sum(program_wall_s[s])) * 1e9 for s in out["stage"]]
    # The program's order (its stages as first run), not the profiled ranges': a stage whose first steps were warm-up
    # (set apart, not profiled: nsightflow.capture.read.warmup) starts later in the timeline than in the program.
    order = {stage: i for i, stage in enumerate(program_wall_s)}
    return out.sort_values("stage", key=lambda s: s.map(order), kind="stable", ignore_index=True)


def _util(amount: float, seconds: float, peak: float) -> float:
    """amount / (seconds × peak): a utilisation, NaN where any part is missing or zero."""
    if not (seconds and peak) or not np.isfinite(amount) or not np.isfinite(peak):
        return np.nan
    return amount / (seconds * peak)


def _num(v: Any) -> float:
    return np.nan if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def with_kernel_counts(stages: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Each stage's distinct kernels (operators on the CPU), counted from its kernel table: a stage of an analysis
    without ncu results has its kernels all the same."""
    counts = kernels.groupby("stage")["kernel"].nunique() if len(kernels) else pd.Series(dtype="int64")
    out = stages.copy()
    out["kernels"] = [int(counts.get(st, 0)) for st in out["stage"]]
    return out


def stage_summary(
    stages: pd.DataFrame, measured: pd.DataFrame, analytic: dict[str, StageCount], pk: Peaks, divergence: float
) -> pd.DataFrame:
    """Per stage: wall and GPU busy time (timeline), FLOPs and bytes (ncu, scaled), utilisation on each time.

    MFU divides the model's FLOPs (nsightflow.capture.inside.flops, causal-adjusted) by time × peak; HFU divides
    the FLOPs the hardware executed (ncu counters), which include tile padding and recomputation.
    Both use measured times; their ratio (``executed_over_model``) shows wasted tensor work.

    ``stages``: wall time per stage (stage, range_instances, wall_ns, optionally wall_profiled_ns: see
    with_program_wall); ``measured``: per stage busy_ns,
    covered_ns and counter totals (stage_measured; counters NaN where the backend has none);
    ``analytic``: the analytic counts per stage (values None where they could not be counted).
    """
    rows = []
    m_by = measured.set_index("stage")
    for _, st in stages.iterrows():
        name = st["stage"]
        m = m_by.loc[name] if name in m_by.index else pd.Series(dtype=float)
        busy_ns = float(m.get("busy_ns", 0.0))
        flops, dram = float(m.get("flops", np.nan)), float(m.get("dram_bytes", np.nan))
        # HFU and executed/model: all executed FLOPs where the non-tensor ones were collected, else the tensor
        # pipes' (the GEMMs and attentions then all ran there; the rest is elementwise work, about 1%).
        executed = flops if np.isfinite(flops) else float(m.get("flops_tensor", np.nan))
        an = analytic.get(name, StageCount())
        model = _num(an.model_flops)
        by_class = an.by_class or {}
        wall_s, busy_s = st["wall_ns"] * 1e-9, busy_ns * 1e-9
        covered = float(m.get("covered_ns", np.nan))
        comm_ns = float(m.get("comm_ns", np.nan))
        profilable = busy_ns - (comm_ns if np.isfinite(comm_ns) else 0.0)  # ncu never profiles communication
        row = {
            "stage": name,
            "range_instances": int(st["range_instances"]),
            "wall_ms": st["wall_ns"] / 1e6,
            "wall_profiled_ms": float(st.get("wall_profiled_ns", np.nan)) / 1e6,
            "gpu_busy_ms": busy_ns / 1e6,
            # Launch classes and profiled launches exist only where ncu profiled (NaN elsewhere, never a zero).
            "classes": _num(m.get("classes")),
            "profiled_launches": _num(m.get("profiled")),
            "comm_ms": comm_ns / 1e6,
            "coverage": covered / profilable if profilable > 0 and np.isfinite(covered) else np.nan,
            "flops_measured": flops,
            "flops_tensor_measured": float(m.get("flops_tensor", np.nan)),
            **{f"flops_measured_{c}": float(m.get(f"flops_{c}", np.nan)) for c in OP_CLASSES},
            "flops_analytic": _num(an.flops),
            "flops_analytic_causal": _num(an.flops_causal_adjusted),
            "flops_analytic_gemm": _num(by_class.get("gemm")),
            "flops_analytic_attention": _num(by_class.get("attention")),
            "flops_analytic_other": _num(by_class.get("other")),
            "executed_over_model": executed / model if model else np.nan,
            "dram_bytes_measured": dram,
            "mfu_wall": _util(model, wall_s, pk.compute),
            "mfu_busy": _util(model, busy_s, pk.compute),
            "hfu_wall": _util(executed, wall_s, pk.compute),
            "hfu_busy": _util(executed, busy_s, pk.compute),
            "dram_bw_util_busy": _util(dram, busy_s, pk.dram),
            "dram_bw_util_wall": _util(dram, wall_s, pk.dram),
        }
        row["bytes_analytic"] = _num(an.bytes_lower_bound)
        row["bw_util_busy_model"] = _util(row["bytes_analytic"], busy_s, pk.dram)
        # Against the datasheet's dense peak too: the denominator published MFU figures divide by.
        row["mfu_wall_datasheet"] = _util(model, wall_s, _num(pk.datasheet_compute))
        row["mfu_busy_datasheet"] = _util(model, busy_s, _num(pk.datasheet_compute))
        if pk.ceiling_compute is not None:
            row["mfu_busy_ceiling"] = _util(model, busy_s, pk.ceiling_compute)
            row["dram_bw_util_busy_ceiling"] = _util(dram, busy_s, _num(pk.ceiling_dram))
        row.update(uncounted.not_counted(an, m.get("tensor_by_op"), row["flops_tensor_measured"]))
        expert = (float(m.get("expert_ns", np.nan)), float(m.get("expert_flops", np.nan)))
        row.update(experts.expert_columns(an, *expert, busy_ns, model="expert_flops" not in measured.columns))
        row["busy_over_wall"] = busy_ns / st["wall_ns"] if st["wall_ns"] else np.nan
        row["diverges"] = bool(row["busy_over_wall"] < divergence)
        if model == 0:  # no GEMM or attention in the model count (an optimizer step): MFU says nothing
            for col in ("mfu_wall", "mfu_busy", "mfu_busy_ceiling", "mfu_wall_datasheet", "mfu_busy_datasheet"):
                if col in row:
                    row[col] = np.nan
        if np.isfinite(row["coverage"]) and row["coverage"] < MIN_COVERAGE:
            for col in COUNTER_COLUMNS:
                if col in row:
                    row[col] = np.nan
        rows.append(row)
    return pd.DataFrame(rows)


# Under this share of a stage's busy time with counters, its measured totals say more about what was not measured
# than about the stage: they are not shown ("—"; a diagnostic gives the share). Above it they are lower bounds.
MIN_COVERAGE = 0.5
COUNTER_COLUMNS = (
    "flops_measured",
    "flops_not_counted",
    "flops_tensor_measured",
    *(f"flops_measured_{c}" for c in OP_CLASSES),
    "executed_over_model",
    "dram_bytes_measured",
    "hfu_wall",
    "hfu_busy",
    "dram_bw_util_busy",
    "dram_bw_util_wall",
    "dram_bw_util_busy_ceiling",
)
