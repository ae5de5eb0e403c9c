"""Assemble one run's tables from its files: timeline stats, capture plans, ncu exports, FLOP counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from nsightflow import metrics, ncu, nsys
from nsightflow.select import select_kernels


def _kernel_results(raw: pd.DataFrame, export: str | Path) -> pd.DataFrame:
    """Per-result metrics of one export; refuses per-range exports, which cannot be joined per kernel."""
    if "Grid Size" not in raw.columns:
        raise ValueError(f"{export}: one result per NVTX range (range or app-range replay), not per kernel; "
                         "nsightflow's per-kernel join and scaling need kernel results: set ncu.replay_mode "
                         "to 'kernel' (or 'application')")
    return metrics.result_metrics(raw)


def aggregate_run(stats_dir: str | Path, sqlite: str | Path, selected_csv: str | Path, plans: list[str | Path],
                  exports: list[str | Path], flops_json: str | Path, dtype: str, divergence: float = 0.5,
                  ceiling_json: str | Path | None = None) -> dict:
    """Per-kernel and per-stage tables for one run, plus peaks and notes on anything not measured."""
    matched, raws = [], []
    for plan_path, export in zip(sorted(map(Path, plans)), sorted(map(Path, exports))):
        plan = json.loads(plan_path.read_text())
        if Path(export).stem.removesuffix(".raw") != plan["capture_id"]:
            raise ValueError(f"export {export} does not belong to plan {plan_path}")
        raw, _ = ncu.parse_raw_csv(Path(export))
        raws.append(raw)
        m = metrics.match_to_timeline(_kernel_results(raw, export), plan["expected"], plan["capture_id"])
        m["stage"] = plan["stage"]
        matched.append(m)
    if not matched:
        raise ValueError("no ncu captures to aggregate: the selection planned none")
    analytic = json.loads(Path(flops_json).read_text())["stages"]
    ceiling = json.loads(Path(ceiling_json).read_text()) if ceiling_json else None
    return summarise(Path(stats_dir), sqlite, pd.read_csv(selected_csv), matched, raws, analytic, dtype,
                     divergence, ceiling)


def aggregate_captures(imported: str | Path, divergence: float = 0.5) -> dict:
    """Tables for captures made elsewhere (see nsightflow.captures): ncu results matched to the timeline
    without capture plans; the dtype is the precision that did most of the tensor work."""
    from nsightflow.captures import expected_launches

    imported = Path(imported)
    launches = nsys.launch_sequence(imported / "timeline.sqlite") if (imported / "timeline.sqlite").exists() else None
    matched, raws = [], []
    for export in sorted((imported / "ncu").glob("*.raw.csv")):
        raw, _ = ncu.parse_raw_csv(export)
        res = _kernel_results(raw, export)
        expected, stage, _ = expected_launches(res, launches)
        m = metrics.match_to_timeline(res, expected, export.name.removesuffix(".raw.csv"))
        m["stage"] = stage
        matched.append(m)
        raws.append(raw)
    flops = imported / "analytic_flops.json"
    analytic = json.loads(flops.read_text())["stages"] if flops.exists() else {}
    if not matched:
        kernels = nsys.kernel_table(imported / "stats" / "nvtx_kern_sum.csv")
        stages = nsys.stage_table(imported / "stats" / "nvtx_sum.csv")
        ranked = select_kernels(kernels, None, 1.0).assign(selected=False)
        ranked["avg_ns"] = ranked["total_ns"] / ranked["instances"]
        pk = metrics.peaks(pd.DataFrame(columns=["sm_hz", "dram_hz", "bf16_dense_per_cycle", "ffma_per_cycle",
                                                 "dram_bytes_per_cycle"]), nsys.gpu_name(imported / "timeline.sqlite")
                           if (imported / "timeline.sqlite").exists() else None, "bfloat16")
        ssum = metrics.stage_summary(kernels, ranked, stages, analytic, pk, divergence)
        return {"kernels": ranked, "stages": ssum, "peaks": pk, "results": pd.DataFrame(),
                "notes": ["no ncu exports among the captures: times only, from the nsys timeline."]}
    results = pd.concat(matched, ignore_index=True)
    tensor = {p: results[f"flops_tensor_{p}"].sum() for p in metrics.DTYPE_BY_TENSOR_PRECISION}
    dtype = metrics.DTYPE_BY_TENSOR_PRECISION[max(tensor, key=tensor.get)] if max(tensor.values()) > 0 else "float32"
    selected = results[["stage", "kernel"]].drop_duplicates()
    agg = summarise(imported / "stats", imported / "timeline.sqlite", selected, matched, raws, analytic, dtype,
                    divergence, None)
    agg["notes"].insert(0, f"analysis of existing captures: precision taken as {dtype} (most tensor-pipe FLOPs)"
                        + ("" if analytic else "; no analytic_flops.json among them, so no model FLOPs and no MFU, "
                           "only HFU from the counted FLOPs"))
    return agg


def summarise(stats_dir: Path, sqlite: str | Path, selected: pd.DataFrame, matched: list[pd.DataFrame],
              raws: list[pd.DataFrame], analytic: dict, dtype: str, divergence: float,
              ceiling: dict | None) -> dict:
    """Kernel and stage tables from ncu results already joined to the timeline (shared by every ncu path)."""
    kernels = nsys.kernel_table(stats_dir / "nvtx_kern_sum.csv")
    stages = nsys.stage_table(stats_dir / "nvtx_sum.csv")
    results = pd.concat(matched, ignore_index=True)
    device = next((str(r["device__attribute_display_name"].iloc[0]) for r in raws
                   if "device__attribute_display_name" in r.columns and len(r)), None) or nsys.gpu_name(sqlite)
    pk = metrics.peaks(results, device, dtype)
    if ceiling:
        pk = metrics.with_ceiling(pk, ceiling)
    # Every kernel of each stage, ranked by time: captured ones get counts, the rest stay empty.
    ranked = select_kernels(kernels, None, 1.0)
    ranked["selected"] = ranked.set_index(["stage", "kernel"]).index.isin(selected.set_index(["stage", "kernel"]).index)
    ksum = metrics.kernel_summary(results, ranked, pk)
    ssum = metrics.stage_summary(kernels, ksum, stages, analytic, pk, divergence)
    notes = stage_notes(ssum)
    sampled = results.groupby("stage")["step"].apply(lambda x: sorted(set(int(v) for v in x))).to_dict()
    for stage, steps in sampled.items():
        n = int(stages.loc[stages["stage"] == stage, "range_instances"].iloc[0])
        if n > 1:
            notes.append(f"{stage}: counts sampled from steps {steps} of {n} and scaled to all launches "
                         "with the timeline's instance counts.")
    return {"kernels": ksum, "stages": ssum, "peaks": pk, "notes": notes, "results": results}


def aggregate_torch(kernels: pd.DataFrame, stages: pd.DataFrame, flops_json: str | Path, ceiling_json: str | Path,
                    dtype: str, top_n: int | None, coverage: float | None, kind: str,
                    divergence: float = 0.5) -> dict:
    """One run's tables from a torch.profiler trace: timeline times, analytic FLOPs and bytes, measured ceilings.

    There are no hardware counters on this path: per-kernel FLOPs and bytes stay empty, and the
    roofline is analytic, one point per stage.
    """
    idle = sorted(set(stages["stage"]) - set(kernels["stage"]))
    if stages.empty or idle:
        raise ValueError(f"no kernels or operators ran inside the ranges of stage(s) {idle or 'any'}: the work "
                         "happens outside the stages (in setup, or on another thread), or the stage does nothing; "
                         "move the work into the stage function")
    ceiling = json.loads(Path(ceiling_json).read_text())
    pk = metrics.ceiling_peaks(ceiling, dtype)
    analytic = json.loads(Path(flops_json).read_text())["stages"]
    ranked = select_kernels(kernels, None, 1.0)
    chosen = select_kernels(kernels, top_n, coverage)
    ranked["selected"] = ranked.set_index(["stage", "kernel"]).index.isin(chosen.set_index(["stage", "kernel"]).index)
    ranked["avg_ns"] = ranked["total_ns"] / ranked["instances"]
    ssum = metrics.stage_summary(kernels, ranked, stages, analytic, pk, divergence)
    what = "CUDA kernels (CUPTI)" if kind == "gpu" else "CPU operators (self time)"
    notes = [f"torch.profiler backend: the kernel table lists {what}; there are no hardware counters on this path, "
             "so FLOPs are FlopCounterMode's and bytes a lower bound (each operator's tensors touched once; "
             "DRAM traffic can be lower when intermediates stay in cache). The roofline is analytic, per stage."]
    notes += stage_notes(ssum)
    return {"kernels": ranked, "stages": ssum, "peaks": pk, "notes": notes}


def stage_notes(ssum: pd.DataFrame) -> list[str]:
    """Per stage: what the counters did not cover, wall time far above busy time, and FLOP differences."""
    notes = []
    for _, s in ssum.iterrows():
        if np.isfinite(s["coverage"]) and s["coverage"] < 0.999:
            notes.append(f"{s['stage']}: FLOPs and bytes are counted for the captured kernels only, "
                         f"{s['coverage']:.1%} of the stage's GPU time; the rest is not measured, so its HFU is a lower bound.")
        if s["diverges"]:
            notes.append(f"{s['stage']}: busy time is {s['busy_over_wall']:.0%} of the range's wall time: the device "
                         "waits on the CPU (launch overhead, Python dispatch, synchronisation); MFU on wall time "
                         "measures the program, MFU on busy time the kernels.")
        notes += flop_notes(s)
    return notes


def flop_notes(s: pd.Series) -> list[str]:
    """Explain where a stage's measured (executed) FLOPs and its model FLOPs differ for a structural reason."""
    a, c, m, r = s["flops_analytic"], s["flops_analytic_causal"], s["flops_measured"], s["executed_over_model"]
    notes = []
    if np.isfinite(a) and np.isfinite(c) and a != c:
        notes.append(f"{s['stage']}: FlopCounterMode counts causal attention as full ({a:.4g}); only the "
                     f"unmasked part is computed ({c:.4g} after adjusting); measured {m:.4g}.")
    if np.isfinite(r) and r > 1.2:
        notes.append(f"{s['stage']}: the GPU executed {r:.2f}x the model's FLOPs (HFU > MFU). Tensor-core "
                     "instructions work on fixed tiles (Hopper wgmma: 64 rows, N of 8 or more; flash-attention "
                     "kernels: blocks of 16-128 queries and keys), so a small dimension such as the few tokens of "
                     "a decode step is padded and the padding is counted; the kernel table's FLOPs per launch "
                     "show which kernels do it.")
    elif np.isfinite(r) and r < 0.8 and s["coverage"] >= 0.999:
        notes.append(f"{s['stage']}: ncu counted {r:.2f}x the model's FLOPs although every kernel was captured: "
                     "part of the work runs on pipes the default metrics do not count (e.g. integer or FP8 "
                     "without its metric), or FlopCounterMode over-counts an operator.")
    return notes


def command_records(cmd_jsons: list[str | Path], ncu_bin: str) -> list[dict]:
    """The ncu capture and export commands behind a run's numbers, from the capture rule's records."""
    out = []
    for p in sorted(map(Path, cmd_jsons)):
        cmd = json.loads(p.read_text())
        out.append({"what": f"ncu capture {cmd['capture_id']} (replay mode {cmd.get('replay_mode', 'kernel')})",
                    "argv": cmd["argv"]})
        out.append({"what": f"export {cmd['capture_id']}", "argv": ncu.export_argv(ncu_bin, f"{cmd['capture_id']}.ncu-rep")})
    return out


def diagnose(agg: dict, records: list[dict], manifest: dict | None = None) -> list[dict]:
    """The report's diagnostics: tool warnings, replay-mode fallbacks, clock state, low coverage and every
    number that is estimated rather than measured. Each item: level (warning, estimate, info), source, message."""
    out: list[dict] = []
    for w in (manifest or {}).get("warnings", []):
        out.append({"level": "warning", "source": "nsys", "message": w})
    for rec in records:
        src = f"ncu capture {rec['capture_id']}"
        for tried in rec.get("fallback_from", []):
            out.append({"level": "warning", "source": src, "message": f"replay mode {tried['replay_mode']} refused "
                        f"({tried['why']}); the numbers come from replay mode {rec.get('replay_mode')}"})
        out += [{"level": "warning", "source": src, "message": w} for w in rec.get("warnings", [])]
    clocks = {rec.get("clock_control") for rec in records}
    if "none" in clocks:
        out.append({"level": "info", "source": "ncu", "message": "clocks not locked (clock_control none): the GPU ran at "
                    "its own clocks; counts do not depend on clocks, and times come from the nsys timeline"})
    if "base" in clocks:
        out.append({"level": "info", "source": "ncu", "message": "clocks locked to base by ncu (clock_control base): "
                    "ncu durations are slower than a normal run; times come from the nsys timeline"})
    pk = agg["peaks"]
    for key in ("compute", "dram"):
        src = str(pk.get(f"{key}_source", ""))
        if not src.startswith(("ncu", "measured")):
            out.append({"level": "estimate", "source": "peaks", "message": f"{key} peak not measured: {src}"})
    for _, st in agg["stages"].iterrows():
        cov = st.get("coverage")
        if cov is not None and np.isfinite(cov) and cov < 0.999:
            out.append({"level": "warning", "source": st["stage"], "message": f"counters cover {cov:.1%} of the stage's "
                        "GPU time; FLOPs and bytes of the rest are not measured (HFU and bandwidth are lower bounds)"})
        if np.isfinite(st.get("bytes_analytic", np.nan)):
            out.append({"level": "estimate", "source": st["stage"], "message": "bytes touched by operators are a lower "
                        "bound computed from tensor sizes, not a measurement"})
    for note in agg["notes"]:
        if "sampled from steps" in note:
            out.append({"level": "estimate", "source": note.split(":", 1)[0], "message": note.split(": ", 1)[1]})
    return out


def write_run(agg: dict, kernels_csv: str | Path, stages_csv: str | Path, summary_json: str | Path,
              commands: list[dict] | None = None, diagnostics: list[dict] | None = None) -> None:
    """The run's tables as CSV (for pandas and diffs) and its peaks, notes, diagnostics and commands as JSON.

    Each file is written beside its target and moved into place, so a killed job leaves none half-written.
    """
    for df, path in ((agg["kernels"], kernels_csv), (agg["stages"], stages_csv)):
        tmp = Path(str(path) + ".tmp")
        df.to_csv(tmp, index=False)
        tmp.replace(path)
    tmp = Path(str(summary_json) + ".tmp")
    tmp.write_text(json.dumps({"peaks": agg["peaks"], "notes": agg["notes"], "commands": commands or [],
                               "diagnostics": diagnostics if diagnostics is not None else diagnose(agg, [])},
                              indent=2, default=float))
    tmp.replace(summary_json)


def load_run(run_id: str, kernels_csv, stages_csv, summary_json, manifest_json) -> dict:
    """A run as the report wants it, from the files its backend wrote."""
    summary = json.loads(Path(summary_json).read_text())
    manifest = json.loads(Path(manifest_json).read_text())
    return {"run_id": run_id, "kernels": pd.read_csv(kernels_csv), "stages": pd.read_csv(stages_csv),
            "peaks": summary["peaks"], "notes": summary["notes"], "manifest": manifest,
            "diagnostics": summary.get("diagnostics", []),
            "commands": list(manifest.get("commands", [])) + list(summary.get("commands", []))}
