"""What a reader must know to read a run's numbers, as one list of typed records (nsightflow.records.Diagnostic) made
where the facts are known, each said once: notes (wall time against busy time, FLOP differences with their structural
reasons, counts that could not be made) and the diagnostics of a run page (tool warnings, clock state, coverage,
estimates, precisions collected)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from nsightflow import ncu_metrics, units
from nsightflow.analysis.aggregate import FULL_COVERAGE, RunTables
from nsightflow.analysis.metrics import MIN_COVERAGE
from nsightflow.analysis.program_notes import program_notes
from nsightflow.capture.read import ncu_csv
from nsightflow.formulas import TILE
from nsightflow.precisions import SIMT
from nsightflow.records import CaptureRecord, Diagnostic, Manifest, StageCount

MODE_TEXT = {
    "representatives": "one profiled launch per class of identical launches (the same operator call, by shapes "
    "and arguments, launching the same kernel with the same grid, block and shared memory); a call profiled in "
    "one step stands for the same call in every step of its stage, and launches no call identifies (CUDA-graph "
    "replays, compiled code) are profiled in each sampled step and stand for the launch at the same position "
    "in the other steps",
    "every_launch": "every launch of the sampled steps profiled, each class's mean scaled by its launches in the "
    "timeline",
}


def note(source: str, message: str) -> Diagnostic:
    """A note: how to read a number of ``source`` (a stage, or "" for the run)."""
    return Diagnostic("note", source, message)


def wall_note(
    program: dict[str, Any] | None,
    profiler: str,
    probe_stands_in: bool = False,
    walls: pd.DataFrame | None = None,
    device: str = "gpu",
) -> Diagnostic:
    """What the wall times on the page are; ``probe_stands_in``: the timeline traced the probe pass alone;
    ``walls``: the stages' program and profiled walls (``wall_ns``, ``wall_profiled_ns``), to say which ran longer;
    ``device``: 'gpu' or 'cpu', whose busy time it is."""
    busy = (
        "busy times are the GPU's, which the profiler does not slow"
        if device == "gpu"
        else "busy times are the operators' (self time under the profiler, which slows them), or, where that exceeds "
        "the program's own wall, their share of the profiled steps applied to that wall"
    )
    if program and probe_stands_in:
        return note(
            "",
            "wall times are the program's own: every step timed after the warm-up with no NVTX range and no profiler "
            f"collecting. {profiler} traced the probe pass alone (the program's first pass did no one-time work, so "
            "the probe pass launches the program's kernels): kernels, their counts and busy times come from it, and "
            "'wall under profiler' is left empty, since the probe's dispatch slows those steps, not only the profiler.",
        )
    if program:
        return note(
            "",
            "wall times are the program's own: every step timed after the warm-up with no NVTX range and no profiler "
            f"collecting; 'wall under profiler' is the same steps' under {profiler}{_which_longer(walls)}; {busy}.",
        )
    return note(
        "",
        f"wall times are those of the ranges under {profiler}, which adds time to every call: a stage of many small "
        f"calls runs faster without it; {busy.split(',')[0] if device == 'gpu' else 'busy times are the operators'}.",
    )


def _which_longer(walls: pd.DataFrame | None) -> str:
    """Which stages ran longer under the profiler and which shorter (a run's own spread can exceed its cost)."""
    unit = "ns" if walls is not None and "wall_profiled_ns" in walls else "ms"
    if walls is None or f"wall_profiled_{unit}" not in walls or walls[f"wall_profiled_{unit}"].isna().all():
        return ""
    ratio = walls[f"wall_profiled_{unit}"] / walls[f"wall_{unit}"]
    longer = [f"{st} {r - 1:+.0%}" for st, r in zip(walls["stage"], ratio, strict=True) if np.isfinite(r) and r >= 1]
    shorter = [f"{st} {r - 1:+.0%}" for st, r in zip(walls["stage"], ratio, strict=True) if np.isfinite(r) and r < 1]
    said = []
    if longer:
        said.append(f"longer for {', '.join(longer)} (the profiler adds time to every call)")
    if shorter:
        said.append(f"shorter for {', '.join(shorter)} (the program's own step times vary from run to run by more)")
    return ": " + ", ".join(said) if said else ""


def stage_notes(ssum: pd.DataFrame, analytic: dict[str, StageCount] | None = None) -> list[Diagnostic]:
    """Per stage: wall time far above busy time, FLOP differences, and analytic counts that could not be made (what
    the counters did not cover is a diagnostic: :func:`diagnose`)."""
    notes = []
    for _, s in ssum.iterrows():
        stage = str(s["stage"])
        if s["diverges"]:
            notes.append(
                note(
                    stage,
                    f"busy time is {s['busy_over_wall']:.0%} of the range's wall time: the device "
                    "waits on the CPU (launch overhead, Python dispatch, synchronisation); MFU on wall time "
                    "measures the program, MFU on busy time the kernels.",
                )
            )
        over = [
            f"{label} {s[col]:.0%}"
            for col, label in (
                ("mfu_busy", "MFU"),
                ("hfu_busy", "HFU"),
                ("dram_bw_util_busy", "DRAM bandwidth utilisation"),
                ("bw_util_busy_model", "bandwidth utilisation"),
            )
            if col in s and np.isfinite(s[col]) and s[col] > 1
        ]
        if over:
            notes.append(
                note(
                    stage,
                    f"{', '.join(over)} on busy time exceed the peak they divide by: that peak is "
                    "a measured rate (or a datasheet's), not a proven bound, and this stage ran faster.",
                )
            )
        count = (analytic or {}).get(stage, StageCount())
        for why in count.not_counted:
            notes.append(note(stage, f"no analytic FLOPs (so no MFU): {why}."))
        notes += uncounted_notes(s)
        notes += flop_notes(s, count)
        if "flops_tensor_ranges" in s and np.isfinite(s["flops_tensor_ranges"]):
            notes.append(
                note(
                    stage,
                    f"range replay counted {s['flops_tensor_ranges']:.4g} tensor FLOPs and "
                    f"{s['dram_bytes_ranges']:.4g} DRAM bytes; per-kernel results give "
                    f"{s['flops_tensor_measured']:.4g} and {s['dram_bytes_measured']:.4g} (a range keeps data in "
                    "L2 from one kernel to the next; kernel replay flushes the caches before each kernel).",
                )
            )
    return notes


def uncounted_notes(s: pd.Series) -> list[Diagnostic]:
    """Operators the model count has no FLOP formula for (nsightflow.analysis.uncounted): what MFU leaves out."""
    ops = str(s.get("not_counted_ops") or "")
    if not ops or ops == "nan":
        return []
    left, tensor = s.get("flops_not_counted", np.nan), s.get("flops_tensor_measured", np.nan)
    share = (
        f": their kernels executed {units.si(left, 'FLOP')}, {left / tensor:.1%} of the stage's executed tensor FLOPs"
        if np.isfinite(left) and np.isfinite(tensor) and tensor > 0
        else " (no hardware counters here to say how many FLOPs they execute)"
    )
    return [
        note(
            str(s["stage"]),
            f"the model count has no FLOP formula for {ops}, so MFU leaves their work out{share}. Register one "
            "(torch.utils.flop_counter.register_flop_formula) to count them.",
        )
    ]


# Executed over model FLOPs above this: the device did work the model count does not describe, which a note explains
# from evidence (padding, operators without a formula) or says it cannot.
EXCESS = 1.2


def flop_notes(s: pd.Series, count: StageCount | None = None) -> list[Diagnostic]:
    """Explain where a stage's measured (executed) FLOPs and its model FLOPs differ, from evidence: tile padding only
    where the count saw a GEMM or attention with a dimension below a tile (``count.padded``), operators without a
    formula where their kernels executed the gap; otherwise say that neither explains it."""
    a, c, m, r = s["flops_analytic"], s["flops_analytic_causal"], s["flops_measured"], s["executed_over_model"]
    stage = str(s["stage"])
    count = count or StageCount()
    notes = []
    if np.isfinite(a) and np.isfinite(c) and a != c:
        measured = (
            f"; ncu measured {units.si(m, 'FLOP')} executed"
            if np.isfinite(m)
            else " (no hardware counters on this backend to compare with)"
        )
        notes.append(
            note(
                stage,
                "causal attention computes only the unmasked part: model FLOPs "
                f"{units.si(c, 'FLOP')} ({units.si(a, 'FLOP')} with attention in full){measured}.",
            )
        )
    if np.isfinite(r) and r > EXCESS:
        notes.append(note(stage, _excess(s, count, r)))
    elif np.isfinite(r) and r < 0.8 and s["coverage"] >= FULL_COVERAGE:
        notes.append(
            note(
                stage,
                f"ncu counted {r:.2f}x the model's FLOPs although every kernel was captured: "
                "part of the work runs on pipes the default metrics do not count (e.g. integer or FP8 "
                "without its metric), or the analytic count over-counts an operator.",
            )
        )
    return notes


# Executed FLOPs within this factor of the count's tile bound are within it (a tile of 320 rows, a split-K's extra
# reduction): padding can still explain them.
BOUND_SLACK = 1.05


def _excess(s: pd.Series, count: StageCount, r: float) -> str:
    """Why the GPU executed ``r`` times the model's FLOPs, as far as the evidence goes: operators without a formula
    (their kernels' FLOPs), or padding where the count's GEMMs and attentions, every dimension rounded up to the
    largest tensor-core tile, could execute that much (``count.tile_bound``)."""
    said = f"the GPU executed {r:.2f}x the model's FLOPs (HFU > MFU)"
    left, tensor = float(s.get("flops_not_counted", np.nan)), float(s.get("flops_tensor_measured", np.nan))
    model = float(s["flops_analytic_causal"]) if np.isfinite(s["flops_analytic_causal"]) else float(s["flops_analytic"])
    parts = []
    if np.isfinite(left) and np.isfinite(tensor) and tensor > 0 and left > 0.05 * tensor:
        parts.append(
            f"{left / tensor:.0%} of the executed tensor FLOPs come from operators the model count has no formula "
            f"for ({s['not_counted_ops']})"
        )
    bound = count.tile_bound / model if count.tile_bound is not None and model > 0 else np.nan
    if count.padded and np.isfinite(bound) and r <= bound * BOUND_SLACK:
        calls = sum(int(v["calls"]) for v in count.padded.values())
        shapes = "; ".join(str(v["shape"]) for v in count.padded.values())
        parts.append(
            f"padding: {calls} GEMM or attention call(s) have dimensions that are not multiples of the tiles tensor "
            f"cores compute ({shapes}), and rounded up to the largest tiles ({TILE} rows for GEMMs) the count's "
            f"GEMMs and attentions come to {bound:.2f}x the model's FLOPs, within which the kernels' padding lies"
        )
    if parts:
        return f"{said}: " + "; and ".join(parts) + ". The kernel table's FLOPs per launch show which kernels do it."
    if count.tile_bound is None:
        return (
            f"{said}. This analytic count does not record its GEMMs' shapes (it predates them), so whether padding "
            "to tensor-core tiles explains it cannot be told; the kernel table's FLOPs per launch show which kernels "
            "execute the extra. Rerun the profiling rule for the evidence."
        )
    return (
        f"{said}, and neither padding nor a missing formula explains it: every GEMM and attention of the count, each "
        f"dimension rounded up to the largest tensor-core tile, comes to {bound:.2f}x the model's FLOPs at most, and "
        "every operator whose kernels executed tensor FLOPs is counted. The kernel table's FLOPs per launch show which "
        "kernels execute the extra (recomputation, or a formula that under-counts its operator)."
    )


def command_records(records: list[CaptureRecord], ncu_bin: str) -> list[dict[str, Any]]:
    """The ncu capture and export commands behind a run's numbers, from the capture rule's records."""
    out = []
    for rec in sorted(records, key=lambda r: r.report):
        out.append({"what": f"ncu capture ({rec.what}, replay mode {rec.replay_mode})", "argv": rec.argv})
        out.append({"what": "export", "argv": ncu_csv.export_argv(ncu_bin, rec.report)})
    return out


GEMM_SHORTFALL = 0.99  # measured GEMM FLOPs under this share of the model's: some were not counted


def diagnose(agg: RunTables, records: list[CaptureRecord], manifest: Manifest | None = None) -> list[Diagnostic]:
    """The report's diagnostics: tool warnings, clock state, coverage and every number that is estimated
    rather than measured."""
    out = [Diagnostic("warning", "nsys", w) for w in (manifest.warnings if manifest else [])]
    out += program_notes(manifest)
    if manifest is not None and manifest.precision_level in ("warning", "info"):  # decided with the precision
        level: Literal["warning", "info"] = "warning" if manifest.precision_level == "warning" else "info"
        text = f"MFU against the {agg.peaks.precision} peak: {manifest.precision_why}"
        out.append(Diagnostic(level, "workload", text))
    for rec in records:
        src = f"ncu capture ({rec.what})"
        out += [Diagnostic("warning", src, w) for w in rec.warnings]
        if rec.tensor_precisions and set(rec.tensor_precisions) != set(ncu_metrics.ALL_PRECISIONS):
            out.append(
                Diagnostic(
                    "info",
                    src,
                    f"tensor FLOPs collected for {', '.join(rec.tensor_precisions)}: the precisions of every "
                    "GEMM and attention operator the workload ran (config ncu.tensor_precisions: all collects "
                    "every one)" + "".join(f"; {how}" for how in rec.precisions_how if "graph" in how),
                )
            )
        if rec.non_tensor_flops is False:
            seen = rec.precisions_seen
            on_tensor_cores = seen is not None and SIMT not in seen
            out.append(
                Diagnostic(
                    "info" if on_tensor_cores else "warning",
                    src,
                    "FLOPs outside the tensor pipes not collected"
                    + (
                        " (elementwise kernels' work: every GEMM and attention ran on tensor cores)"
                        if on_tensor_cores
                        else (
                            " although GEMMs or attentions ran on the FMA units for "
                            f"{(rec.simt_share or 0) * 100:.2g}% of a stage's analytic FLOPs at most (below the 0.5% "
                            "that pays for the counts): HFU is a lower "
                            "bound by about that share"
                        )
                        if rec.simt_share is not None
                        else " although GEMMs or attentions may run outside the tensor cores: HFU is a lower bound"
                    )
                    + "; HFU, executed / model and kernel rates use the tensor pipes' FLOPs; 'FLOPs (ncu)' shows — "
                    "(config ncu.non_tensor_flops: true collects them, at about 0.3 s per profiled launch)",
                )
            )
    clocks = {rec.clock_control for rec in records}
    if "none" in clocks:
        out.append(
            Diagnostic(
                "info",
                "ncu",
                "clocks not locked (clock_control none): the GPU ran at its own clocks; "
                "counts do not depend on clocks, and times come from the nsys timeline",
            )
        )
    if "base" in clocks:
        out.append(
            Diagnostic(
                "info",
                "ncu",
                "clocks locked to base by ncu (clock_control base): ncu durations are "
                "slower than a normal run; times come from the nsys timeline",
            )
        )
    for key in ("compute", "dram"):
        src = agg.peaks.source(key)
        if not src.startswith(("ncu", "measured")):
            out.append(Diagnostic("estimate", "peaks", f"{key} peak not measured: {src}"))
    for _, st in agg.stages.iterrows():
        cov = st.get("coverage")
        if cov is not None and np.isfinite(cov) and cov < MIN_COVERAGE:
            out.append(
                Diagnostic(
                    "warning",
                    st["stage"],
                    f"counters cover {cov:.3%} of the stage's GPU time, under {MIN_COVERAGE:.0%}: its measured "
                    "FLOPs, bytes, HFU and bandwidth are not shown ('—'); they would count the rest as zero",
                )
            )
        elif cov is not None and np.isfinite(cov) and cov < FULL_COVERAGE:
            out.append(
                Diagnostic(
                    "warning",
                    st["stage"],
                    f"counters cover {cov:.1%} of the stage's GPU time; FLOPs "
                    "and bytes of the rest are not measured (HFU and bandwidth are lower bounds)",
                )
            )
        got, model = st.get("flops_measured_gemm", np.nan), st.get("flops_analytic_gemm", np.nan)
        if np.isfinite(got) and np.isfinite(model) and got < GEMM_SHORTFALL * model:
            out.append(
                Diagnostic(
                    "warning",
                    st["stage"],
                    f"the GEMM kernels measured {got:.4g} FLOPs, fewer than the model's {model:.4g} (a GEMM "
                    "executes at least its 2·M·N·K): tensor work in a precision ncu did not collect? Set "
                    "ncu.tensor_precisions: all",
                )
            )
        if np.isfinite(st.get("bytes_analytic", np.nan)):
            out.append(
                Diagnostic(
                    "estimate",
                    st["stage"],
                    "bytes touched by operators are a lower bound computed from tensor sizes, not a measurement",
                )
            )
    return out + agg.estimates
