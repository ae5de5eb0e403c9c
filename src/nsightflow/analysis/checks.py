"""Consistency checks where a run's inputs meet: each input alone can look plausible (a relabelled column, an
analytic count of another configuration, an edited timeline), so they are checked against one another.

A check that fails raises :class:`InconsistentInputs`, naming the file, the row or stage, and the fix: a number
built on inconsistent inputs is never published, and never silently adjusted. Checks of a single file's own
content (units, signs, duplicates, parse errors) live with their readers (nsightflow.capture.read.ncu_csv,
nsightflow.capture.launch.nsys).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsightflow.errors import InconsistentInputs
from nsightflow.records import Peaks, StageCount

# How far a utilisation may exceed its peak before an input must be wrong: ncu's peaks are the hardware's
# (its per-cycle rate at the clock it measured); a datasheet rate is a reference, not a bound; a ceiling measured
# by a microbenchmark is the best of a few runs on a machine that may be busy (a CPU's under a second test run
# measured 1.54x and 1.63x low: nsightflow.analysis.torch_backend.within_ceilings then takes the stage's rate).
TOLERANCE = {"ncu": 1.05, "measured": 4.0, "other": 1.5}


def check_bounds(stages: pd.DataFrame, pk: Peaks) -> None:
    """Refuse numbers no hardware can produce: negative counts, or a utilisation beyond its peak by more than
    the tolerance (an edited or mismatched input, e.g. swapped columns of a stats export)."""
    for _, s in stages.iterrows():
        for col in ("flops_measured", "dram_bytes_measured", "wall_ms", "gpu_busy_ms"):
            if np.isfinite(s.get(col, np.nan)) and s[col] < 0:
                raise InconsistentInputs(f"stage {s['stage']!r}: {col} is {s[col]:.4g}, negative: an input is wrong")
        for col, peak in (
            ("mfu_busy", "compute"),
            ("hfu_busy", "compute"),
            ("mfu_wall", "compute"),
            ("hfu_wall", "compute"),
            ("dram_bw_util_busy", "dram"),
        ):
            v = s.get(col, np.nan)
            source = pk.source(peak)
            kind = next((k for k in ("ncu", "measured") if source.startswith(k)), "other")
            limit = TOLERANCE[kind]
            if np.isfinite(v) and v > limit:
                raise InconsistentInputs(
                    f"stage {s['stage']!r}: {col} is {v:.3g} ({v:.0%}) of the {peak} peak ({source}), beyond the "
                    f"{limit:.2f} any device allows: an input is wrong (a stats export edited or from another run, "
                    "counts from another capture, an analytic count of another workload); busy "
                    f"{s['gpu_busy_ms']:.4g} ms, wall {s['wall_ms']:.4g} ms"
                )


# ncu's kernel time against the timeline's for the same launches, summed over a capture (each result against the
# median of its class's launches): 1.03-1.80 in the committed H100 and H200 captures, as ncu replays each kernel
# at base clocks after flushing the caches. Outside this band the durations of one side were scaled (every
# kernel's end moved: x0.5 of a typical capture reads 2.6, x2 reads 0.64) or the export describes other
# launches (a column of bytes read as durations is off by orders of magnitude).
DURATION_RATIO = (0.75, 2.3)


def check_durations(results: pd.DataFrame, launches: pd.DataFrame, source: str) -> None:
    """ncu's duration of each result against the timeline's durations of the launches of its class (same stage and
    step): summed over the capture, their ratio must lie in :data:`DURATION_RATIO`, or one side's durations are
    not these launches' as they ran."""
    if results.empty or "duration_ns" not in results or results["duration_ns"].isna().all():
        return
    med = launches.groupby(["stage", "step", "class_key"])["duration_ns"].median()
    ref = med.reindex(pd.MultiIndex.from_frame(results[["stage", "step", "class_key"]])).to_numpy(dtype=float)
    got = results["duration_ns"].to_numpy(dtype=float)
    ok = np.isfinite(got) & np.isfinite(ref) & (ref > 0)
    if not ok.any():
        return
    m = float(got[ok].sum() / ref[ok].sum())
    lo, hi = DURATION_RATIO
    if not lo <= m <= hi:
        raise InconsistentInputs(
            f"{source}: ncu's kernel durations (gpu__time_duration.sum) sum to {m:.3g}x the timeline's durations of "
            f"the same launches (over {int(ok.sum())} results; {lo}-{hi}x is expected, as ncu replays at base clocks "
            "with flushed caches): the timeline's or the export's durations are not these launches' as they ran "
            "(edited, a column relabelled, or an export of another run); export both again from one run"
        )


def check_analytic(
    analytic: dict[str, StageCount], stages: pd.DataFrame, source: str, probe_calls: dict[str, int] | None = None
) -> None:
    """An analytic count (analytic_flops.json) must describe the run it sits beside: the same stages, each with as
    many steps as the run's ranges, and (``probe_calls``: operator calls per stage in the timeline's probe pass,
    nsight backend) as many operator calls."""
    if not analytic:
        return
    steps = dict(zip(stages["stage"].astype(str), stages["range_instances"].astype(int), strict=True))
    counted = {str(s): c.repeats for s, c in analytic.items()}
    if set(counted) != set(steps):
        raise InconsistentInputs(
            f"{source}: counts stages {sorted(counted)}, the run has stages {sorted(steps)}: it is the analytic count "
            "of another workload; use the analytic_flops.json made with this run's timeline"
        )
    differ = {s: (counted[s], steps[s]) for s in steps if counted[s] > 0 and counted[s] != steps[s]}
    if differ:
        raise InconsistentInputs(
            f"{source}: steps per stage (analytic count, run) {differ}: it is the analytic count of another "
            "configuration; use the analytic_flops.json made with this run's timeline"
        )
    for stage, calls in (probe_calls or {}).items():
        want = analytic[stage].calls if stage in analytic else None
        if want is not None and want != calls:
            raise InconsistentInputs(
                f"{source}: stage {stage!r} counted {want} operator calls, the timeline's probe pass made {calls}: "
                "they come from different runs; make the timeline and the count in one launch (the timeline rule)"
            )


# Measured GEMM FLOPs under this share of the model's, with every stage launch counted and every precision the
# operators ran in collected, cannot come from the same run: a GEMM executes at least its 2·M·N·K.
GEMM_FLOOR = 0.9


def check_gemm_floor(stages: pd.DataFrame, source: str, all_collected: bool) -> None:
    """Refuse a stage whose measured GEMM FLOPs fall well below the model's where nothing can explain it (full
    coverage, every precision the operators used collected): the analytic count describes another workload."""
    if not all_collected:
        return
    for _, s in stages.iterrows():
        # Launches with no operator call (compiled code, graph replays) may be GEMMs too: their FLOPs count here
        # (and where no launch has an operator, the split is unknown: all of them).
        parts = [s.get("flops_measured_gemm", np.nan), s.get("flops_measured_unattributed", np.nan)]
        got = float(np.nansum(parts)) if np.isfinite(parts).any() else np.nan
        model = s.get("flops_analytic_gemm", np.nan)
        full = s.get("coverage", np.nan) >= 0.999
        if full and np.isfinite(got) and np.isfinite(model) and model > 0 and got < GEMM_FLOOR * model:
            raise InconsistentInputs(
                f"{source}: stage {s['stage']!r}: the GEMM kernels executed {got:.4g} FLOPs, {got / model:.1%} of the "
                f"model's {model:.4g}, though every launch was counted in every precision its operators used: the "
                "analytic count describes another workload or configuration; use the one made with this run"
            )


def check_kernel_records(launches: pd.DataFrame, source: str) -> None:
    """Each kernel record once, with a duration: a kernel that ended when it started (or before) did not run as
    recorded, and the same kernel with the same start and end on two streams is one record copied (busy time
    doubled). Neither occurs in any committed capture. Refused, naming the first."""
    if launches.empty:
        return
    flat = launches[launches["duration_ns"] <= 0]
    if len(flat):
        r = flat.iloc[0]
        raise InconsistentInputs(
            f"{source}: stage {r['stage']!r}: {len(flat)} kernel record(s) end when they start or before (first: "
            f"{str(r['kernel'])[:80]!r} at {int(r['start'])} ns): the timeline was edited or damaged; export it "
            "again from the .nsys-rep"
        )
    twins = launches[launches.duplicated(["start", "end", "kernel"], keep=False)]
    if len(twins) and twins.groupby(["start", "end", "kernel"])["stream"].nunique().gt(1).any():
        r = twins.iloc[0]
        raise InconsistentInputs(
            f"{source}: stage {r['stage']!r}: {len(twins) // 2} kernel record(s) appear on two streams with the same "
            f"start and end (first: {str(r['kernel'])[:80]!r}): records were copied (busy time doubled); export it "
            "again from the .nsys-rep"
        )


# Kernels of one stream run one after another; a dependent launch may start a little before the previous one ends
# (Hopper's programmatic dependent launch: 160 ns at most in the committed captures). Overlaps beyond both bounds,
# on more than one kernel, are records edited or merged: every kernel's duration x1.3 gives 24-209 in each GPU-bound
# capture committed, none gives any.
OVERLAP_NS = 1000
OVERLAP_SHARE = 0.1


def check_streams(launches: pd.DataFrame, source: str) -> None:
    """Refuse a timeline in which kernels of one stream of one process start, more than once, over
    :data:`OVERLAP_NS` and over :data:`OVERLAP_SHARE` of the previous kernel's duration before it ends: durations
    were scaled, records duplicated or timelines merged."""
    if launches.empty or "stream" not in launches:
        return
    keys = [c for c in ("globalPid", "stream") if c in launches]
    for key, g in launches.sort_values("start").groupby(keys, sort=False, dropna=False):
        start, end = g["start"].to_numpy(), g["end"].to_numpy()
        if len(start) < 2:
            continue
        last_end = np.maximum.accumulate(end)[:-1]
        overlap = last_end - start[1:]
        bad = np.flatnonzero((overlap > OVERLAP_NS) & (overlap > OVERLAP_SHARE * (end[:-1] - start[:-1])))
        if len(bad) > 1:
            i = bad[0] + 1
            stream = key[-1] if isinstance(key, tuple) else key
            raise InconsistentInputs(
                f"{source}: stage {g['stage'].iloc[i]!r}, stream {stream}: a kernel starts {overlap[i - 1] / 1e3:.4g} "
                f"µs before the previous one on its stream ends ({len(bad)} such kernels), though a stream runs one "
                "kernel at a time: durations were scaled, records duplicated or timelines merged; export it again "
                "from the .nsys-rep"
            )


# Each tensor precision's dense rate against bf16's, per cycle (Hopper and Blackwell; Ampere has no fp8): the time a
# result's tensor FLOPs need at least, in bf16 cycles.
TENSOR_RATE = {"bf16": 1.0, "fp16": 1.0, "tf32": 0.5, "fp8": 2.0}
# A result's own counters against its own peaks (per-cycle peak × the clock ncu measured during it): the committed
# captures reach 0.87 of the tensor peak and 0.86 of DRAM's at most; no kernel exceeds the hardware's.
RATE_LIMIT = 1.05


def check_result_rates(results: pd.DataFrame, source: str) -> None:
    """Refuse an ncu result that did more work in its duration than its device can: tensor FLOPs (all precisions,
    each at its rate), DRAM or L2 bytes over the time they need at the peak the same row's cells give. A counter
    scaled (tensor FLOPs x2) or a duration too short is named by result ID."""
    if results.empty or "duration_ns" not in results:
        return
    secs = results["duration_ns"].to_numpy(dtype=float) * 1e-9

    def col(name: str) -> np.ndarray:
        return results[name].to_numpy(dtype=float) if name in results else np.full(len(results), np.nan)

    sm_hz, dram_hz = col("sm_hz"), col("dram_hz")
    bf16_cycles = sum(np.nan_to_num(col(f"flops_tensor_{p}")) / r for p, r in TENSOR_RATE.items())
    needs = {
        "tensor FLOPs": bf16_cycles / (col("bf16_dense_per_cycle") * sm_hz),
        "DRAM bytes": col("dram_bytes") / (col("dram_bytes_per_cycle") * dram_hz),
        "L2 bytes": col("l2_bytes") / (col("l2_bytes_per_cycle") * sm_hz),
    }
    for what, need in needs.items():
        with np.errstate(invalid="ignore", divide="ignore"):
            share = need / secs
        bad = np.flatnonzero(np.isfinite(share) & (share > RATE_LIMIT))
        if len(bad):
            r = results.iloc[bad[0]]
            raise InconsistentInputs(
                f"{source}: result ID {r['ncu_id']} ({str(r.get('ncu_kernel', ''))[:60]!r}): its {what} need "
                f"{share[bad[0]]:.3g}x its duration at the peak its own cells give ({len(bad)} such results), more "
                f"than any device runs ({RATE_LIMIT}x): a counter or a duration column was scaled or edited; export "
                "again with ncu --import R.ncu-rep --page raw --csv --print-units base"
            )


# DRAM bytes against L2 bytes over a capture whose caches ncu flushed before each kernel: every kernel then reads its
# inputs from DRAM once at least, while L2 serves each of their re-reads. 0.068-0.54 in the committed captures (a
# large GEMM's tiles re-read from L2 give the lowest); a DRAM column read in the wrong unit (1000x low, the unit row
# still "byte") gives under 0.001.
DRAM_FLOOR = 0.005


def check_dram_floor(results: pd.DataFrame, flushed: bool, source: str) -> None:
    """Refuse a capture made with flushed caches whose DRAM bytes are under :data:`DRAM_FLOOR` of its L2 bytes:
    a DRAM counter was scaled or read in another unit. Without flushing (``--cache-control none``) data that fits
    in L2 may never touch DRAM, so nothing is checked."""
    if not flushed or results.empty or not {"dram_bytes", "l2_bytes"} <= set(results.columns):
        return
    ok = results["dram_bytes"].notna() & results["l2_bytes"].notna()
    dram, l2 = float(results.loc[ok, "dram_bytes"].sum()), float(results.loc[ok, "l2_bytes"].sum())
    if l2 > 1e6 and dram < DRAM_FLOOR * l2:
        raise InconsistentInputs(
            f"{source}: its {int(ok.sum())} results moved {dram:.4g} DRAM bytes against {l2:.4g} L2 bytes "
            f"({dram / l2:.2g}), though ncu flushed the caches before each kernel, so every kernel read its inputs "
            f"from DRAM (at least {DRAM_FLOOR} of the L2 traffic; 0.068-0.54 in the committed captures): a DRAM "
            "column was scaled or read in another unit; export again with ncu --import R.ncu-rep --page raw --csv "
            "--print-units base"
        )


# An ncu peak (per-cycle rate × measured clock) against the device's datasheet: above it by boost clocks (an H100 at
# 1.98 GHz: +8%), below it at locked or idle clocks; a factor outside these means a unit or a counter is wrong (a
# clock read in kHz as MHz, a peak counter doubled).
PEAK_RANGE = (0.5, 1.25)


def check_peaks(pk: Peaks, source: str) -> None:
    """Refuse ncu peaks no device of that name has: each against its datasheet value where there is one."""
    lo, hi = PEAK_RANGE
    for which, sheet in (("compute", pk.datasheet_compute), ("dram", pk.datasheet_dram)):
        value, src = getattr(pk, which), pk.source(which)
        if not src.startswith("ncu") or sheet is None or not np.isfinite(sheet) or not np.isfinite(value):
            continue
        if not lo <= value / sheet <= hi:
            what = f"{pk.precision} compute" if which == "compute" else "DRAM bandwidth"
            raise InconsistentInputs(
                f"{source}: the {what} peak from ncu's cells is {value:.4g}/s ({src}), {value / sheet:.3g}x the "
                f"{pk.datasheet_source}'s {sheet:.4g}/s; a device of that name runs within {lo}x to {hi}x of it, so "
                "a clock's or a peak counter's cells are wrong (a unit changed, a column edited): export again with "
                "ncu --import R.ncu-rep --page raw --csv --print-units base"
            )
