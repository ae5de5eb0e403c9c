"""Assemble one run's tables from its files: timeline stats, capture plans, ncu exports, FLOP counts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from nsightflow import metrics, ncu, nsys
from nsightflow.select import select_kernels


def tool_version(binary: str) -> str:
    """First version-looking line of ``binary --version``, or why there is none."""
    try:
        out = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    lines = [ln.strip() for ln in out.splitlines() if any(ch.isdigit() for ch in ln)]
    return lines[-1] if lines else out.strip()


def aggregate_run(stats_dir: str | Path, sqlite: str | Path, selected_csv: str | Path, plans: list[str | Path],
                  exports: list[str | Path], flops_json: str | Path, dtype: str, divergence: float = 0.5) -> dict:
    """Per-kernel and per-stage tables for one run, plus peaks and notes on anything not measured."""
    stats_dir = Path(stats_dir)
    kernels = nsys.kernel_table(stats_dir / "nvtx_kern_sum.csv")
    stages = nsys.stage_table(stats_dir / "nvtx_sum.csv")
    selected = pd.read_csv(selected_csv)
    matched, raws = [], []
    for plan_path, export in zip(sorted(map(Path, plans)), sorted(map(Path, exports))):
        plan = json.loads(plan_path.read_text())
        if Path(export).stem.removesuffix(".raw") != plan["capture_id"]:
            raise ValueError(f"export {export} does not belong to plan {plan_path}")
        raw, _ = ncu.parse_raw_csv(Path(export))
        if "Grid Size" not in raw.columns:
            raise ValueError(f"{export}: one result per NVTX range (range or app-range replay), not per kernel; "
                             "nsightflow's per-kernel join and scaling need kernel results: set ncu.replay_mode "
                             "to 'kernel' (or 'application')")
        raws.append(raw)
        m = metrics.match_to_timeline(metrics.result_metrics(raw), plan["expected"], plan["capture_id"])
        m["stage"] = plan["stage"]
        matched.append(m)
    if not matched:
        raise ValueError("no ncu captures to aggregate: the selection planned none")
    results = pd.concat(matched, ignore_index=True)
    device = next((str(r["device__attribute_display_name"].iloc[0]) for r in raws
                   if "device__attribute_display_name" in r.columns and len(r)), None) or nsys.gpu_name(sqlite)
    pk = metrics.peaks(results, device, dtype)
    analytic = json.loads(Path(flops_json).read_text())["stages"]
    # Every kernel of each stage, ranked by time: captured ones get counts, the rest stay empty.
    ranked = select_kernels(kernels, None, 1.0)
    ranked["selected"] = ranked.set_index(["stage", "kernel"]).index.isin(selected.set_index(["stage", "kernel"]).index)
    ksum = metrics.kernel_summary(results, ranked, pk)
    ssum = metrics.stage_summary(kernels, ksum, stages, analytic, pk, divergence)
    notes = []
    for _, s in ssum.iterrows():
        if s["coverage"] < 0.999:
            notes.append(f"{s['stage']}: FLOPs and bytes are counted for the captured kernels only, "
                         f"{s['coverage']:.1%} of the stage's GPU time; the rest is not measured, so its MFU is a lower bound.")
        if s["diverges"]:
            notes.append(f"{s['stage']}: GPU busy time is {s['busy_over_wall']:.0%} of the range's wall time: the GPU "
                         "waits on the CPU (launch overhead, Python dispatch, synchronisation); MFU on wall time "
                         "measures the program, MFU on busy time the kernels.")
        notes += flop_notes(s)
    sampled = results.groupby("stage")["step"].apply(lambda x: sorted(set(int(v) for v in x))).to_dict()
    for stage, steps in sampled.items():
        n = int(stages.loc[stages["stage"] == stage, "range_instances"].iloc[0])
        if n > 1:
            notes.append(f"{stage}: counts sampled from steps {steps} of {n} and scaled to all launches "
                         "with the timeline's instance counts.")
    return {"kernels": ksum, "stages": ssum, "peaks": pk, "notes": notes, "results": results}


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


def write_run(agg: dict, kernels_csv: str | Path, stages_csv: str | Path, summary_json: str | Path) -> None:
    agg["kernels"].to_csv(kernels_csv, index=False)
    agg["stages"].to_csv(stages_csv, index=False)
    Path(summary_json).write_text(json.dumps({"peaks": agg["peaks"], "notes": agg["notes"]}, indent=2, default=float))


def load_run(run_id: str, kernels_csv, stages_csv, summary_json, manifest_json, cmds: list, config: dict,
             ncu_bin: str) -> dict:
    """A run as report.render wants it, from the files aggregate wrote."""
    summary = json.loads(Path(summary_json).read_text())
    manifest = json.loads(Path(manifest_json).read_text())
    commands = [{"what": "Timeline (nsys)", "argv": manifest["nsys_argv"]}]
    for p in sorted(map(Path, cmds)):
        cmd = json.loads(p.read_text())
        commands.append({"what": f"ncu capture {cmd['capture_id']}", "argv": cmd["argv"]})
        commands.append({"what": f"export {cmd['capture_id']}",
                         "argv": ncu.export_argv(ncu_bin, f"{cmd['capture_id']}.ncu-rep")})
    return {"run_id": run_id, "kernels": pd.read_csv(kernels_csv), "stages": pd.read_csv(stages_csv),
            "peaks": summary["peaks"], "notes": summary["notes"], "config": config,
            "versions": manifest.get("versions"), "commands": commands}
