"""One self-contained HTML report: config, tool versions, stage and kernel tables, roofline, commands."""

from __future__ import annotations

import base64
import html
import io
import json
import math

import pandas as pd


def roofline_png(kernels: pd.DataFrame, pk: dict, title: str) -> bytes:
    """Log-log roofline: DRAM and compute roofs, one point per captured kernel (intensity vs achieved rate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = kernels.dropna(subset=["arithmetic_intensity", "achieved_flops_per_s"])
    pts = pts[(pts["arithmetic_intensity"] > 0) & (pts["achieved_flops_per_s"] > 0)]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    lo = min([0.01] + list(pts["arithmetic_intensity"] / 3))
    hi = max([1e4] + list(pts["arithmetic_intensity"] * 3))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if math.isfinite(pk.get("compute", float("nan"))) and math.isfinite(pk.get("dram", float("nan"))):
        ax.plot(xs, [min(pk["compute"], x * pk["dram"]) for x in xs], color="black", lw=1.5,
                label=f"roof: {pk['compute'] / 1e12:.0f} TFLOP/s, {pk['dram'] / 1e12:.2f} TB/s")
    for stage, g in pts.groupby("stage"):
        ax.scatter(g["arithmetic_intensity"], g["achieved_flops_per_s"], s=18 + 60 * g["share"], label=stage, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("achieved FLOP/s (timeline time)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def stage_points(stages: pd.DataFrame) -> pd.DataFrame:
    """One roofline point per stage from analytic counts: model FLOPs / operator bytes, FLOPs / busy time."""
    model = stages["flops_analytic_causal"].fillna(stages["flops_analytic"])
    return pd.DataFrame({
        "stage": stages["stage"], "share": 1.0,
        "arithmetic_intensity": model / stages.get("bytes_analytic", pd.Series(float("nan"), index=stages.index)),
        "achieved_flops_per_s": model / (stages["gpu_busy_ms"] * 1e-3),
    })


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        if abs(v) >= 1e6 or (0 < abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)


def table(df: pd.DataFrame, columns: dict[str, str]) -> str:
    """An HTML table of ``columns`` (source -> header); every cell HTML-escaped (C++ templates)."""
    cols = [c for c in columns if c in df.columns and not df[c].isna().all()]
    head = "".join(f"<th>{html.escape(columns[c])}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td{' class=name' if c == 'kernel' else ''}>{html.escape(_fmt(r[c]))}</td>"
                                    for c in cols) + "</tr>" for _, r in df.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STAGE_COLUMNS = {
    "stage": "stage", "range_instances": "ranges", "wall_ms": "wall ms (NVTX range)", "gpu_busy_ms": "busy ms (kernels, or CPU operators)",
    "busy_over_wall": "busy / wall", "classes": "launch classes", "profiled_launches": "launches profiled",
    "coverage": "captured share of GPU time", "flops_measured": "FLOPs (ncu, scaled)",
    "flops_analytic": "FLOPs (analytic, attention in full)", "flops_analytic_causal": "FLOPs (analytic, causal-adjusted)",
    "flops_analytic_gemm": "of which GEMM", "flops_analytic_attention": "of which attention",
    "executed_over_model": "executed / model FLOPs",
    "mfu_wall": "MFU on wall (model FLOPs)", "mfu_busy": "MFU on busy (model FLOPs)",
    "hfu_wall": "HFU on wall (executed FLOPs)", "hfu_busy": "HFU on busy (executed FLOPs)",
    "dram_bytes_measured": "DRAM bytes (ncu, scaled)",
    "dram_bw_util_busy": "DRAM BW util on busy", "dram_bw_util_wall": "DRAM BW util on wall",
    "mfu_busy_ceiling": "MFU on busy vs measured ceiling", "dram_bw_util_busy_ceiling": "DRAM BW util on busy vs measured copy",
    "flops_tensor_measured": "tensor FLOPs (per kernel)", "flops_tensor_ranges": "tensor FLOPs (range replay)",
    "dram_bytes_ranges": "DRAM bytes (range replay)",
    "bytes_analytic": "bytes touched (operators, lower bound)", "bw_util_busy_model": "BW util on busy (operator bytes)",
    "diverges": "wall ≫ busy",
}
KERNEL_COLUMNS = {
    "stage": "stage", "rank": "#", "selected": "top-N", "kernel": "kernel (demangled, from nsys)", "instances": "launches",
    "launches_per_range": "per range (step)", "classes": "classes", "sampled_launches": "profiled",
    "total_ns": "GPU ns (timeline)", "share": "share of stage", "flops_per_launch": "FLOPs / launch",
    "dram_bytes_per_launch": "DRAM B / launch", "l2_bytes_per_launch": "L2 B / launch", "l1_bytes_per_launch": "L1 B / launch",
    "arithmetic_intensity": "FLOP / DRAM B", "achieved_flops_per_s": "FLOP/s", "compute_utilisation": "of compute peak",
    "dram_utilisation": "of DRAM peak",
}

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;font-size:12px;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}td.name{text-align:left;max-width:520px;word-break:break-all}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:8px;font-size:11px;white-space:pre-wrap;word-break:break-all}.warn{color:#a40}"""


def _png(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _page(title: str, body: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "</body></html>")


def _backend_line(backend: str, reason: str) -> str:
    return (f"<p>Backend: <b>{html.escape(backend)}</b>" + (f" — {html.escape(reason)}" if reason else "") + "</p>")


def render_run(run: dict, backend: str, reason: str, settings: dict, title: str = "nsightflow report") -> str:
    """One run's page. ``run`` as aggregate.load_run gives it; ``settings``: the config values that shaped it."""
    pk = run["peaks"]
    parts = [f"<p><a href='{'../' * (run['run_id'].count('/') + 1)}report.html'>all runs</a></p>",
             f"<h2>Run {html.escape(run['run_id'])}</h2>", _backend_line(backend, reason),
             "<h3>Stages</h3>" + table(run["stages"], STAGE_COLUMNS)]
    parts += [f"<p class='warn'>{html.escape(note)}</p>" for note in run.get("notes", [])]
    parts.append(diagnostics_html(run.get("diagnostics", [])))
    parts.append("<h3>Peaks</h3><ul>"
                 f"<li>compute ({html.escape(str(pk.get('precision')))}): {_fmt(pk.get('compute', float('nan')) / 1e12)} TFLOP/s "
                 f"— {html.escape(str(pk.get('compute_source')))}</li>"
                 f"<li>DRAM: {_fmt(pk.get('dram', float('nan')) / 1e12)} TB/s — {html.escape(str(pk.get('dram_source')))}</li>")
    if "ceiling_source" in pk:
        parts.append(f"<li>measured ceilings: {_fmt(pk['ceiling_compute'] / 1e12)} TFLOP/s, "
                     f"{_fmt(pk['ceiling_dram'] / 1e12)} TB/s — {html.escape(pk['ceiling_source'])}</li>")
    if "datasheet_source" in pk:
        parts.append(f"<li>datasheet, for comparison: {_fmt(pk.get('datasheet_compute', float('nan')) / 1e12)} TFLOP/s, "
                     f"{_fmt(pk.get('datasheet_dram', float('nan')) / 1e12)} TB/s — {html.escape(pk['datasheet_source'])}</li>")
    parts.append("</ul>")
    has_counters = "arithmetic_intensity" in run["kernels"] and run["kernels"]["arithmetic_intensity"].notna().any()
    points = run["kernels"] if has_counters else stage_points(run["stages"])
    parts.append(("<h3>Roofline (captured kernels, ncu counters)</h3>" if has_counters else
                  "<h3>Roofline (analytic, per stage: model FLOPs over operator bytes, on busy time)</h3>")
                 + _png(roofline_png(points, pk, f"roofline: {run['run_id']}"), "roofline"))
    parts.append("<h3>Top kernels</h3>" + table(run["kernels"], KERNEL_COLUMNS))
    manifest = run.get("manifest", {})
    parts.append("<h3>Configuration and tool versions</h3><pre>" + html.escape(json.dumps(
        {"settings": settings, "workload": {k: manifest.get(k) for k in ("callable", "args", "params")},
         "versions": manifest.get("versions"), "host": manifest.get("host")}, indent=2, default=str)) + "</pre>")
    parts.append("<h3>Profiler commands behind these numbers</h3>")
    for cmd in run.get("commands", []):
        parts.append(f"<p>{html.escape(cmd['what'])}</p><pre>{html.escape(_quote(cmd['argv']))}</pre>")
    return _page(f"{title}: {run['run_id']}", parts)


def diagnostics_html(items: list[dict]) -> str:
    """Warnings from the tools, clock state, coverage, and what is estimated rather than measured."""
    if not items:
        return "<h3>Diagnostics</h3><p>No warnings; nothing estimated.</p>"
    rows = "".join(f"<tr><td>{html.escape(d['level'])}</td><td>{html.escape(str(d['source']))}</td>"
                   f"<td class=name>{html.escape(d['message'])}</td></tr>" for d in items)
    return ("<h3>Diagnostics</h3><table><thead><tr><th>level</th><th>source</th><th>message</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


COMPARE_COLUMNS = {"wall_ms": "wall ms", "gpu_busy_ms": "busy ms", "mfu_busy": "MFU on busy",
                   "hfu_busy": "HFU on busy", "dram_bw_util_busy": "DRAM BW util on busy",
                   "bw_util_busy_model": "BW util on busy (operator bytes)", "flops_measured": "FLOPs (ncu)",
                   "flops_analytic_causal": "FLOPs (model)"}


def comparison(runs: list[dict]) -> pd.DataFrame:
    """One row per (run, stage): the run's name and swept values beside the stage's numbers."""
    rows = []
    for run in runs:
        for _, st in run["stages"].iterrows():
            row = {"run": run["run_id"], "workload": run["name"], **run["point"], "stage": st["stage"]}
            row.update({c: st[c] for c in COMPARE_COLUMNS if c in st})
            rows.append(row)
    return pd.DataFrame(rows)


def sweep_png(df: pd.DataFrame, param: str, swept: list[str]) -> bytes:
    """Busy time, MFU and bandwidth utilisation against one swept parameter, a line per stage and other values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [c for c in ("gpu_busy_ms", "mfu_busy", "dram_bw_util_busy", "bw_util_busy_model")
               if c in df and df[c].notna().any()]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), dpi=100, squeeze=False)
    others = [p for p in swept if p != param]
    for keys, g in df[df[param].notna()].groupby(["workload", "stage"] + others, dropna=False):
        g = g.sort_values(param)
        label = " ".join(str(k) for k in keys)
        xs = g[param] if pd.api.types.is_numeric_dtype(g[param]) else g[param].astype(str)
        for ax, m in zip(axes[0], metrics):
            ax.plot(xs, g[m], marker="o", label=label)
    for ax, m in zip(axes[0], metrics):
        ax.set_xlabel(param)
        ax.set_title(COMPARE_COLUMNS[m], fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def render_index(runs: list[dict], backend: str, reason: str, title: str = "nsightflow report") -> str:
    """The cross-run report: every sweep point's stages side by side, charts per swept parameter, links."""
    df = comparison(runs)
    swept = list(dict.fromkeys(k for run in runs for k in run["point"]))
    links = "".join(f"<li><a href='{html.escape(r['run_id'])}/report.html'>{html.escape(r['run_id'])}</a></li>"
                    for r in runs)
    parts = [_backend_line(backend, reason), f"<h2>Runs</h2><ul>{links}</ul>",
             "<h2>Stages across runs</h2>"
             + table(df, {"run": "run", **{p: p for p in swept}, "stage": "stage", **COMPARE_COLUMNS})]
    for param in swept:
        parts.append(f"<h3>Against {html.escape(param)}</h3>" + _png(sweep_png(df, param, swept), param))
    for run in runs:
        parts += [f"<p class='warn'>{html.escape(run['run_id'])}: {html.escape(n)}</p>" for n in run.get("notes", [])]
    return _page(title, parts)


def _quote(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in argv)


def write_html(path, text: str) -> None:
    """Write a page atomically: a killed job never leaves a half-written report."""
    from pathlib import Path

    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
