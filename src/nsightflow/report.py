"""One self-contained HTML report: config, tool versions, stage and kernel tables, roofline, commands."""

from __future__ import annotations

import base64
import html
import io
import json
import math

import pandas as pd

from nsightflow import files, units
from nsightflow.aggregate import Diagnostic
from nsightflow.metrics import Peaks, non_tensor_collected


def roofline_png(
    kernels: pd.DataFrame,
    pk: Peaks,
    title: str,
    x_label: str = "arithmetic intensity (FLOP / DRAM byte)",
    y_label: str = "achieved FLOP/s (on busy time)",
) -> bytes:
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
    if units.finite(pk.compute) and units.finite(pk.dram):
        ax.plot(
            xs,
            [min(pk.compute, x * pk.dram) for x in xs],
            color="black",
            lw=1.5,
            label=f"roof: {units.si(pk.compute, 'FLOP/s')}, {units.si(pk.dram, 'B/s')}",
        )
    for stage, g in pts.groupby("stage"):
        ax.scatter(g["arithmetic_intensity"], g["achieved_flops_per_s"], s=18 + 60 * g["share"], label=stage, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
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
    return pd.DataFrame(
        {
            "stage": stages["stage"],
            "share": 1.0,
            "arithmetic_intensity": model / stages.get("bytes_analytic", pd.Series(float("nan"), index=stages.index)),
            "achieved_flops_per_s": model / (stages["gpu_busy_ms"] * 1e-3),
        }
    )


FORMATS = {
    "text": str,
    "count": units.count,
    "ms": units.ms,
    "ns_as_ms": lambda v: units.ms(v / 1e6),
    "flop": lambda v: units.si(v, "FLOP"),
    "bytes": lambda v: units.si(v, "B"),
    "pct": units.percent,
    "flop_rate": lambda v: units.si(v, "FLOP/s"),
    "intensity": lambda v: units.sig(v) if units.finite(v) else units.MISSING,
    "bool": lambda v: "yes" if v is True or v == 1 else "",
}


def cell(v, kind: str) -> str:
    """One table cell's text: a value of a column's kind, or the missing mark (never "nan")."""
    if kind != "text" and kind != "bool" and not units.finite(v):
        return units.MISSING
    if kind == "text" and (v is None or (isinstance(v, float) and math.isnan(v))):
        return units.MISSING
    return FORMATS[kind](v)


def _shown(df: pd.DataFrame, c: str, kind: str) -> bool:
    """A column is shown when it has something to say: some value, and for flags some flag set."""
    if c not in df.columns or df[c].isna().all():
        return False
    return kind != "bool" or bool(df[c].fillna(False).astype(bool).any())


def _td_class(c: str, kind: str) -> str:
    """Long names (kernels, run ids) wrap; other labels stay on one line."""
    if kind != "text":
        return ""
    return " class=name" if c in ("kernel", "run") else " class=label"


def table(df: pd.DataFrame, columns: dict[str, tuple[str, str]], cls: str = "") -> str:
    """An HTML table of ``columns`` (source -> (header, kind)); every cell formatted by its kind and
    HTML-escaped (C++ templates); headers carry their definition as a tooltip where GLOSSARY has one."""
    cols = [c for c, (_, kind) in columns.items() if _shown(df, c, kind)]

    def th(c):
        tip = GLOSSARY_TIPS.get(c)
        title = f' title="{html.escape(tip, quote=True)}"' if tip else ""
        return f"<th{title}>{html.escape(columns[c][0])}</th>"

    body = "".join(
        "<tr>"
        + "".join(f"<td{_td_class(c, columns[c][1])}>{html.escape(cell(r[c], columns[c][1]))}</td>" for c in cols)
        + "</tr>"
        for _, r in df.iterrows()
    )
    return (
        f"<table{f' class={cls}' if cls else ''}><thead><tr>{''.join(th(c) for c in cols)}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def stage_columns(on_cpu: bool, counters: bool = True) -> dict[str, tuple[str, str]]:
    """The stage table's columns; the busy-time source named for the data (CPU operators or GPU kernels);
    without hardware counters (torch.profiler) no launch classes or profiled launches."""
    busy = "busy ms (CPU operators)" if on_cpu else "busy ms (GPU kernels)"
    cols = {
        "stage": ("stage", "text"),
        "range_instances": ("ranges", "count"),
        "wall_ms": ("wall ms", "ms"),
        "wall_profiled_ms": ("wall under profiler ms", "ms"),
        "gpu_busy_ms": (busy, "ms"),
        "busy_over_wall": ("busy / wall", "pct"),
        "classes": ("launch classes", "count"),
        "profiled_launches": ("launches profiled", "count"),
        "coverage": ("coverage", "pct"),
        "flops_measured": ("FLOPs (ncu)", "flop"),
        "flops_analytic": ("FLOPs (model, full attention)", "flop"),
        "flops_analytic_causal": ("FLOPs (model)", "flop"),
        "flops_analytic_gemm": ("of which GEMM", "flop"),
        "flops_analytic_attention": ("of which attention", "flop"),
        "flops_measured_gemm": ("GEMM FLOPs (ncu)", "flop"),
        "flops_measured_attention": ("attention FLOPs (ncu)", "flop"),
        "flops_measured_other": ("other FLOPs (ncu)", "flop"),
        "flops_measured_unattributed": ("FLOPs outside operators (ncu)", "flop"),
        "executed_over_model": ("executed / model", "intensity"),
        "mfu_wall": ("MFU on wall", "pct"),
        "mfu_busy": ("MFU on busy", "pct"),
        "hfu_wall": ("HFU on wall", "pct"),
        "hfu_busy": ("HFU on busy", "pct"),
        "dram_bytes_measured": ("DRAM bytes (ncu)", "bytes"),
        "dram_bw_util_busy": ("DRAM BW util on busy", "pct"),
        "dram_bw_util_wall": ("DRAM BW util on wall", "pct"),
        "mfu_busy_ceiling": ("MFU on busy vs measured ceiling", "pct"),
        "dram_bw_util_busy_ceiling": ("DRAM BW util vs measured copy", "pct"),
        "flops_tensor_measured": ("tensor FLOPs (per kernel)", "flop"),
        "flops_tensor_ranges": ("tensor FLOPs (range replay)", "flop"),
        "dram_bytes_ranges": ("DRAM bytes (range replay)", "bytes"),
        "bytes_analytic": ("bytes touched (operators)", "bytes"),
        "bw_util_busy_model": ("BW util on busy (operator bytes)", "pct"),
        "diverges": ("wall ≫ busy", "bool"),
    }
    if not counters:
        for c in ("classes", "profiled_launches", "coverage"):
            cols.pop(c)
    return cols


def kernel_columns(on_cpu: bool) -> dict[str, tuple[str, str]]:
    """The kernel table's columns: operators on the CPU, kernels (demangled names) on a GPU."""
    return {
        "stage": ("stage", "text"),
        "rank": ("#", "count"),
        "selected": ("top-N", "bool"),
        "kernel": ("operator" if on_cpu else "kernel", "text"),
        "instances": ("launches", "count"),
        "launches_per_range": ("per step", "count"),
        "classes": ("classes", "count"),
        "sampled_launches": ("profiled", "count"),
        "total_ns": ("busy ms", "ns_as_ms"),
        "share": ("share of stage", "pct"),
        "flops_per_launch": ("FLOPs / launch", "flop"),
        "flops_tensor_per_launch": ("tensor FLOPs / launch", "flop"),
        "dram_bytes_per_launch": ("DRAM / launch", "bytes"),
        "l2_bytes_per_launch": ("L2 / launch", "bytes"),
        "l1_bytes_per_launch": ("L1 / launch", "bytes"),
        "arithmetic_intensity": ("FLOP / DRAM byte", "intensity"),
        "achieved_flops_per_s": ("achieved", "flop_rate"),
        "compute_utilisation": ("of compute peak", "pct"),
        "dram_utilisation": ("of DRAM peak", "pct"),
    }


# What each number means, shown on every page (and as header tooltips).
GLOSSARY = [
    (
        "wall",
        "wall_ms",
        "the stage's steps as the program runs them, summed: each step timed (synchronized) after the warm-up "
        "with no NVTX range and no profiler collecting; captures made elsewhere: from the start to the end of "
        "the stage's annotated ranges",
    ),
    (
        "wall under profiler",
        "wall_profiled_ms",
        "the same steps inside their NVTX (or record_function) ranges under the profiler, which adds time to "
        "every launch (nsys about 30 µs on an H200): what the timeline shows, not what the program takes",
    ),
    (
        "busy",
        "gpu_busy_ms",
        "time the device was running the stage's kernels (GPU) or operators (CPU, self "
        "time), from the timeline; busy / wall well below 1 means the host, not the device, sets the pace",
    ),
    (
        "MFU",
        "mfu_busy",
        "model FLOP utilisation: the model's FLOPs (counted from shapes: GEMMs and attention, "
        "causal part only) per second of busy (or wall) time, over the peak",
    ),
    (
        "HFU",
        "hfu_busy",
        "hardware FLOP utilisation: FLOPs the device executed (ncu's tensor and FMA counters, "
        "padding and recomputation included) per second, over the peak; where the FLOPs outside the tensor "
        "pipes were not collected (ncu.non_tensor_flops), the tensor pipes' FLOPs alone",
    ),
    (
        "GEMM / attention / other FLOPs (ncu)",
        "flops_measured_gemm",
        "measured FLOPs of the kernels launched by matmul-like operators, by attention operators, and by every "
        "other operator, as the probe pass saw each kernel's operator (kernels launched outside any operator, "
        "e.g. by CUDA-graph replays or compiled graphs, are in none of the three): beside the model's "
        "GEMM and attention FLOPs, they show where executed work differs from the model's (causal attention "
        "computes whole tiles on the diagonal; elementwise kernels execute FLOPs the model count leaves out)",
    ),
    (
        "DRAM BW util",
        "dram_bw_util_busy",
        "bytes read and written in device memory (ncu) per second of busy time, over the peak bandwidth",
    ),
    (
        "BW util (operator bytes)",
        "bw_util_busy_model",
        "on torch.profiler: bytes of every operator's tensors, "
        "each touched once (a lower bound of memory traffic), per second of busy time, over the measured copy rate",
    ),
    (
        "coverage",
        "coverage",
        "share of the stage's busy time whose kernels have ncu counters (scaled from "
        "representative launches where identical launches were profiled once)",
    ),
    (
        "peaks",
        None,
        "compute and bandwidth peaks of the device as listed under Peaks: ncu's own peak_sustained "
        "metrics at the measured clocks, or measured matmul and copy rates, or named datasheet values",
    ),
    (
        "—",
        None,
        "not available for this backend or stage (e.g. no hardware counters under torch.profiler), never a zero",
    ),
]
GLOSSARY_TIPS = {key: text for _, key, text in GLOSSARY if key}


def glossary_html() -> str:
    items = "".join(f"<dt>{html.escape(term)}</dt><dd>{html.escape(text)}</dd>" for term, _, text in GLOSSARY)
    return f"<details class=glossary><summary>What the columns mean</summary><dl>{items}</dl></details>"


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:12px;margin:.6em 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}td{white-space:nowrap}
td.name{text-align:left;min-width:280px;max-width:560px;white-space:normal;overflow-wrap:anywhere}td.label{text-align:left}th{background:#f3f3f3;cursor:help}
pre{background:#f7f7f7;padding:8px;font-size:11px;white-space:pre-wrap;overflow-wrap:anywhere}
.warn{color:#a40}dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;font-size:13px}
dt{font-weight:600}dd{margin:0}details{margin:.6em 0}summary{cursor:pointer;color:#245}"""


def _png(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _page(title: str, body: list[str]) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "</body></html>"
    )


def _backend_line(backend: str, reason: str) -> str:
    return f"<p>Backend: <b>{html.escape(backend)}</b>" + (f" — {html.escape(reason)}" if reason else "") + "</p>"


def _on_cpu(run: dict) -> bool:
    """Whether the run's numbers come from CPU operators (torch.profiler on the CPU)."""
    return (run.get("manifest", {}).get("environment") or {}).get("device") == "cpu"


def peaks_html(pk: Peaks) -> str:
    """The peaks every utilisation on the page is relative to, with where each comes from."""
    items = [
        f"compute ({html.escape(str(pk.precision))}): {units.si(pk.compute, 'FLOP/s')} — "
        f"{html.escape(str(pk.compute_source))}",
        f"memory bandwidth: {units.si(pk.dram, 'B/s')} — {html.escape(str(pk.dram_source))}",
    ]
    if pk.ceiling_source is not None:
        items.append(
            f"measured ceilings: {units.si(pk.ceiling_compute, 'FLOP/s')}, "
            f"{units.si(pk.ceiling_dram, 'B/s')} — {html.escape(pk.ceiling_source)}"
        )
    if pk.datasheet_source is not None:
        items.append(
            f"datasheet, for comparison: {units.si(pk.datasheet_compute, 'FLOP/s')}, "
            f"{units.si(pk.datasheet_dram, 'B/s')} — {html.escape(pk.datasheet_source)}"
        )
    return "<h3>Peaks</h3><ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def kernels_html(kernels: pd.DataFrame, columns: dict, noun: str = "kernels") -> str:
    """The report's focus per stage (the top-N kernels) in view; every other kernel folded below it."""
    if "selected" not in kernels.columns or not kernels["selected"].fillna(False).astype(bool).any():
        return table(kernels, columns)
    top = kernels["selected"].fillna(False).astype(bool)
    rest = kernels[~top]
    out = table(kernels[top], columns)
    if len(rest):
        out += (
            f"<details><summary>{len(rest)} more {noun} (the rest of each stage's time)</summary>"
            + table(rest, columns)
            + "</details>"
        )
    return out


def render_run(run: dict, backend: str, reason: str, settings: dict, title: str = "nsightflow report") -> str:
    """One run's page. ``run`` as runfiles.load_run gives it; ``settings``: the config values that shaped it."""
    pk = run["peaks"]
    on_cpu = _on_cpu(run)
    parts = [
        f"<p><a href='{'../' * (run['run_id'].count('/') + 1)}report.html'>all runs</a></p>",
        f"<h2>Run {html.escape(run['run_id'])}</h2>",
        _backend_line(backend, reason),
        "<h3>Stages</h3>" + table(run["stages"], stage_columns(on_cpu, backend != "torch"), cls="stages"),
        glossary_html(),
    ]
    parts += [f"<p class='warn'>{html.escape(note)}</p>" for note in run.get("notes", [])]
    parts.append(diagnostics_html(run.get("diagnostics", [])))
    parts.append(peaks_html(pk))
    has_counters = "arithmetic_intensity" in run["kernels"] and run["kernels"]["arithmetic_intensity"].notna().any()
    if has_counters:
        # Without the non-tensor FLOPs (ncu.non_tensor_flops) the rates are the tensor pipes' (metrics.with_rates).
        tensor_only = not non_tensor_collected(run["kernels"].get("flops_per_launch", pd.Series(dtype=float)))
        which = "tensor-pipe FLOP" if tensor_only else "FLOP"
        parts.append(
            "<h3>Roofline (captured kernels, ncu counters"
            + ("; tensor-pipe FLOPs: kernels without tensor work are not shown" if tensor_only else "")
            + ")</h3>"
            + _png(
                roofline_png(
                    run["kernels"],
                    pk,
                    f"roofline: {run['run_id']}",
                    f"arithmetic intensity ({which} / DRAM byte, ncu)",
                    f"achieved {which}/s (on the kernel's own time)",
                ),
                "roofline",
            )
        )
    else:
        parts.append(
            "<h3>Roofline (per stage: model FLOPs over operator bytes, on busy time)</h3>"
            + _png(
                roofline_png(
                    stage_points(run["stages"]),
                    pk,
                    f"roofline: {run['run_id']}",
                    "arithmetic intensity (model FLOP / operator byte)",
                    "achieved model FLOP/s (on busy time)",
                ),
                "roofline",
            )
        )
    parts.append(
        f"<h3>Top {'operators' if on_cpu else 'kernels'}</h3>"
        + kernels_html(run["kernels"], kernel_columns(on_cpu), "operators" if on_cpu else "kernels")
    )
    manifest = run.get("manifest", {})
    parts.append(
        "<h3>Configuration and tool versions</h3><pre>"
        + html.escape(
            json.dumps(
                {
                    "settings": settings,
                    "workload": {k: manifest.get(k) for k in ("callable", "args", "params")},
                    "versions": manifest.get("versions"),
                    "host": manifest.get("host"),
                },
                indent=2,
                default=str,
            )
        )
        + "</pre>"
    )
    parts.append("<h3>Profiler commands behind these numbers</h3>")
    for cmd in run.get("commands", []):
        parts.append(f"<p>{html.escape(cmd['what'])}</p><pre>{html.escape(_quote(cmd['argv']))}</pre>")
    return _page(f"{title}: {run['run_id']}", parts)


def diagnostics_html(items: list[Diagnostic]) -> str:
    """Warnings from the tools, clock state, coverage, and what is estimated rather than measured."""
    if not items:
        return "<h3>Diagnostics</h3><p>No warnings; nothing estimated.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(d.level)}</td><td>{html.escape(str(d.source))}</td>"
        f"<td class=name>{html.escape(d.message)}</td></tr>"
        for d in items
    )
    return (
        "<h3>Diagnostics</h3><table><thead><tr><th>level</th><th>source</th><th>message</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


COMPARE_COLUMNS = {
    "wall_ms": ("wall ms", "ms"),
    "gpu_busy_ms": ("busy ms", "ms"),
    "mfu_busy": ("MFU on busy", "pct"),
    "hfu_busy": ("HFU on busy", "pct"),
    "dram_bw_util_busy": ("DRAM BW util on busy", "pct"),
    "bw_util_busy_model": ("BW util on busy (operator bytes)", "pct"),
    "flops_measured": ("FLOPs (ncu)", "flop"),
    "flops_analytic_causal": ("FLOPs (model)", "flop"),
}
# What the sweep charts plot, with their axis labels.
SWEEP_METRICS = {
    "gpu_busy_ms": "busy time (ms)",
    "mfu_busy": "MFU on busy (%)",
    "dram_bw_util_busy": "DRAM BW util on busy (%)",
    "bw_util_busy_model": "BW util, operator bytes (%)",
}


def comparison(runs: list[dict]) -> pd.DataFrame:
    """One row per (run, stage): the run's name and swept values beside the stage's numbers."""
    rows = []
    for run in runs:
        for _, st in run["stages"].iterrows():
            row = {"run": run["run_id"], "workload": run["name"], **run["point"], "stage": st["stage"]}
            row.update({c: st[c] for c in COMPARE_COLUMNS if c in st})
            rows.append(row)
    return pd.DataFrame(rows)


def _figure_png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def breakdown_png(df: pd.DataFrame) -> bytes:
    """Where the time goes, per run: busy time by stage (left), and per stage how close it runs to the
    compute peak (MFU) and to the bandwidth peak (right): the larger bar says which bound it is near."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bw = (
        "dram_bw_util_busy"
        if "dram_bw_util_busy" in df and df["dram_bw_util_busy"].notna().any()
        else "bw_util_busy_model"
    )
    runs = list(dict.fromkeys(df["run"]))
    stages = list(dict.fromkeys(df["stage"]))
    fig, (ax_t, ax_u) = plt.subplots(1, 2, figsize=(12, max(2.8, 1.4 + 0.5 * max(len(runs), len(df) / 2))), dpi=100)
    left = pd.Series(0.0, index=runs)
    for stage in stages:
        g = df[df["stage"] == stage].set_index("run")["gpu_busy_ms"].reindex(runs).fillna(0.0)
        ax_t.barh(runs, g, left=left, label=stage)
        left += g
    ax_t.set_xlabel("busy time (ms), stacked by stage")
    ax_t.invert_yaxis()
    ax_t.legend(
        fontsize=8,
        title="stage",
        title_fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35),
        ncol=min(4, len(stages)),
    )
    labels = [f"{r} · {st}" for r, st in zip(df["run"], df["stage"], strict=True)]
    ys = range(len(df))
    ax_u.barh(
        [y - 0.2 for y in ys],
        100 * df.get("mfu_busy", pd.Series(float("nan"), index=df.index)),  # NaN: no bar (not measured), never a zero
        height=0.4,
        label="compute: MFU on busy",
    )
    ax_u.barh(
        [y + 0.2 for y in ys],
        100 * df.get(bw, pd.Series(float("nan"), index=df.index)),
        height=0.4,
        label="memory: " + ("DRAM BW util on busy" if bw == "dram_bw_util_busy" else "BW util (operator bytes)"),
    )
    ax_u.set_yticks(list(ys), labels, fontsize=8)
    ax_u.invert_yaxis()
    ax_u.set_xlabel("% of peak")
    ax_u.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2)
    for ax in (ax_t, ax_u):
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return _figure_png(fig)


def sweep_png(df: pd.DataFrame, param: str, swept: list[str]) -> bytes:
    """Busy time, MFU and bandwidth utilisation against one swept parameter, a line per stage and other values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [c for c in SWEEP_METRICS if c in df and df[c].notna().any()]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6), dpi=100, squeeze=False)
    others = [p for p in swept if p != param]
    for keys, g in df[df[param].notna()].groupby(["workload", "stage"] + others, dropna=False):
        g = g.sort_values(param)
        workload, stage, *rest = keys
        label = f"{workload} {stage}" + "".join(f", {p}={v}" for p, v in zip(others, rest, strict=True))
        xs = g[param] if pd.api.types.is_numeric_dtype(g[param]) else g[param].astype(str)
        for ax, m in zip(axes[0], metrics, strict=True):
            scale = 1.0 if m == "gpu_busy_ms" else 100.0
            ax.plot(xs, scale * g[m], marker="o", label=label)
    for ax, m in zip(axes[0], metrics, strict=True):
        ax.set_xlabel(f"{param} (workload argument)")
        ax.set_ylabel(SWEEP_METRICS[m])
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="upper center",
        ncol=min(4, len(labels)),
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
        title="workload, stage" + (" and other swept values" if others else ""),
    )
    fig.tight_layout()
    return _figure_png(fig)


def render_index(runs: list[dict], backend: str, reason: str, title: str = "nsightflow report") -> str:
    """The cross-run report: every sweep point's stages side by side, where the time goes, charts per swept
    parameter, links to the run pages."""
    df = comparison(runs)
    swept = list(dict.fromkeys(k for run in runs for k in run["point"]))
    links = "".join(
        f"<li><a href='{html.escape(r['run_id'])}/report.html'>{html.escape(r['run_id'])}</a></li>" for r in runs
    )
    parts = [
        _backend_line(backend, reason),
        f"<h2>Runs</h2><ul>{links}</ul>",
        "<h2>Stages across runs</h2>"
        + table(
            df,
            {"run": ("run", "text"), **{p: (p, "text") for p in swept}, "stage": ("stage", "text"), **COMPARE_COLUMNS},
            cls="stages",
        ),
        glossary_html(),
        "<h2>Where the time goes</h2>" + _png(breakdown_png(df), "time and utilisation by stage"),
    ]
    for param in swept:
        parts.append(
            f"<h3>Against {html.escape(param)} (workload argument swept)</h3>"
            + _png(sweep_png(df, param, swept), f"against {param}")
        )
    for run in runs:
        parts += [f"<p class='warn'>{html.escape(run['run_id'])}: {html.escape(n)}</p>" for n in run.get("notes", [])]
    return _page(title, parts)


def _quote(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in argv)


def write_html(path, text: str) -> None:
    """Write a page atomically: a killed job never leaves a half-written report."""
    files.write_text(path, text)
