"""One self-contained HTML report: config, tool versions, stage and kernel tables, roofline, commands."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from nsightflow import columns, files, units
from nsightflow.analysis.metrics import non_tensor_collected
from nsightflow.records import Diagnostic, Manifest, Peaks
from nsightflow.report import charts
from nsightflow.report.cards_html import cards_html
from nsightflow.report.experts_html import experts_html
from nsightflow.report.glossary import glossary_html
from nsightflow.report.headline import headline_html, headline_line
from nsightflow.report.steps_html import program_metrics_html, steps_html
from nsightflow.report.style import CSS
from nsightflow.report.tables import table


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


def stage_columns(on_cpu: bool, backend: str) -> dict[str, tuple[str, str]]:
    """The stage table's columns (nsightflow.columns) that ``backend`` fills; the busy-time source named for the
    data (CPU operators or GPU kernels)."""
    cols = {c.name: (c.header, c.fmt) for c in columns.STAGES if c.shown and backend in c.backends}
    cols["gpu_busy_ms"] = ("busy ms (CPU operators)" if on_cpu else "busy ms (GPU kernels)", "ms")
    return cols


# The stage table's columns in view before "every column" is ticked: what the headline's numbers rest on.
STAGE_FIRST = frozenset(
    {
        "stage",
        "range_instances",
        "wall_ms",
        "gpu_busy_ms",
        "busy_over_wall",
        "bound",
        "mfu_wall",
        "mfu_busy",
        "dram_bw_util_busy",
        "bw_util_busy_model",
        "coverage",
    }
)


def ranks_html(ranks: pd.DataFrame | None, backend: str) -> str:
    """A job of several processes: its ranks side by side, stage by stage (nsightflow.analysis.ranks); '' otherwise."""
    if ranks is None or ranks.empty:
        return ""
    cols = {c.name: (c.header, c.fmt) for c in columns.RANKS if c.shown and backend in c.backends}
    tips = {c.name: c.definition for c in columns.RANKS if c.definition}
    return "<h3>Ranks</h3>" + table(ranks, cols, cls="ranks", tips=tips)


def kernel_columns(on_cpu: bool, backend: str) -> dict[str, tuple[str, str]]:
    """The kernel table's columns that ``backend`` fills: operators on the CPU, kernels (demangled names) on a GPU."""
    cols = {c.name: (c.header, c.fmt) for c in columns.KERNELS if c.shown and backend in c.backends}
    cols["kernel"] = ("operator" if on_cpu else "kernel", "text")
    return cols


def _png(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def page(title: str, body: list[str]) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "</body></html>"
    )


def _backend_line(backend: str, reason: str) -> str:
    return f"<p>Backend: <b>{html.escape(backend)}</b>" + (f" — {html.escape(reason)}" if reason else "") + "</p>"


def on_cpu(manifest: Manifest | None) -> bool:
    """Whether a run's numbers come from CPU operators (torch.profiler on the CPU), by its manifest."""
    return manifest is not None and manifest.environment.get("device") == "cpu"


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


def kernels_html(kernels: pd.DataFrame, columns: dict[str, Any], noun: str = "kernels") -> str:
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


def render_run(
    run: dict[str, Any], backend: str, reason: str, settings: dict[str, Any], title: str = "nsightflow report"
) -> str:
    """One run's page. ``run`` as runfiles.load_run gives it; ``settings``: the config values that shaped it."""
    pk = run["peaks"]
    cpu = on_cpu(run.get("manifest"))
    parts = [
        f"<p><a href='{'../' * (run['run_id'].count('/') + 1)}report.html'>all runs</a></p>",
        f"<h2>Run {html.escape(run['run_id'])}</h2>",
        _backend_line(backend, reason),
        headline_html(
            run["stages"], run["kernels"], pk, "cpu" if cpu else "gpu", (run.get("manifest") or Manifest()).params
        ),
        "<h3>Stages</h3>" + table(run["stages"], stage_columns(cpu, backend), cls="stages", first=STAGE_FIRST),
        ranks_html(run.get("ranks"), backend),
        experts_html(run.get("experts"), run["stages"]),
        steps_html(run.get("steps")),
        program_metrics_html((run.get("manifest") or Manifest()).program_metrics),
        glossary_html(),
    ]
    said = run.get("diagnostics", [])
    parts += [f"<p class='warn'>{html.escape(d.text)}</p>" for d in said if d.level == "note"]
    parts.append(diagnostics_html([d for d in said if d.level != "note"]))
    manifest = run.get("manifest") or Manifest()
    if manifest.every_wall_s:
        apart: dict[str, list[int]] = {}
        for w in manifest.warmup_steps:
            apart.setdefault(str(w["stage"]), []).append(int(w["step"]))
        parts.append(
            "<h3>Wall time per step (the program's timed run)</h3>"
            + _png(charts.step_walls_png(manifest.every_wall_s, apart), "wall time per step")
        )
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
                charts.roofline_png(
                    run["kernels"],
                    pk,
                    f"roofline: {run['run_id']}",
                    f"arithmetic intensity ({which} / DRAM byte, ncu)",
                    f"achieved {which}/s (on the kernel's own time)",
                    order=list(run["stages"]["stage"]),
                ),
                "roofline",
            )
        )
    else:
        parts.append(
            "<h3>Roofline (per stage: model FLOPs over operator bytes, on busy time)</h3>"
            + _png(
                charts.roofline_png(
                    stage_points(run["stages"]),
                    pk,
                    f"roofline: {run['run_id']}",
                    "arithmetic intensity (model FLOP / operator byte)",
                    "achieved model FLOP/s (on busy time)",
                    order=list(run["stages"]["stage"]),
                ),
                "roofline",
            )
        )
    parts.append(
        f"<h3>Top {'operators' if cpu else 'kernels'}</h3>"
        + kernels_html(run["kernels"], kernel_columns(cpu, backend), "operators" if cpu else "kernels")
        + cards_html(run.get("cards") or [])
    )
    parts.append(
        "<details><summary>Configuration and tool versions</summary><pre>"
        + html.escape(
            json.dumps(
                {
                    "settings": settings,  # the workload's callable or command and its arguments are in here
                    "workload": (
                        {"command": manifest.command, "stage_domain": manifest.stage_domain}
                        if manifest.command
                        else {"params": manifest.params}
                    ),
                    "versions": manifest.versions,
                    "host": manifest.host,
                },
                indent=2,
                default=str,
            )
        )
        + "</pre></details>"
    )
    parts.append("<h3>Profiler commands behind these numbers</h3>")
    for cmd in run.get("commands", []):
        parts.append(f"<p>{html.escape(cmd['what'])}</p><pre>{html.escape(_quote(cmd['argv']))}</pre>")
    return page(f"{title}: {run['run_id']}", parts)


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


# The cross-run table's numbers (nsightflow.columns' headers and formats).
COMPARE = (
    "wall_ms",
    "gpu_busy_ms",
    "mfu_busy",
    "hfu_busy",
    "dram_bw_util_busy",
    "bw_util_busy_model",
    "flops_measured",
)
COMPARE_COLUMNS = {
    name: (columns.column("stages", name).header, columns.column("stages", name).fmt)
    for name in (*COMPARE, "flops_analytic_causal")
}


def comparison(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (run, stage): the run's name and swept values beside the stage's numbers."""
    rows = []
    for run in runs:
        for _, st in run["stages"].iterrows():
            row = {"run": run["run_id"], "workload": run["name"], **run["point"], "stage": st["stage"]}
            row.update({c: st[c] for c in COMPARE_COLUMNS if c in st})
            rows.append(row)
    return pd.DataFrame(rows)


def render_index(runs: list[dict[str, Any]], backend: str, reason: str, title: str = "nsightflow report") -> str:
    """The cross-run report: every sweep point's stages side by side, where the time goes, charts per swept
    parameter, links to the run pages."""
    df = comparison(runs)
    swept = list(dict.fromkeys(k for run in runs for k in run["point"]))
    links = "".join(
        headline_line(r["run_id"], r["stages"], "cpu" if on_cpu(r.get("manifest")) else "gpu") for r in runs
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
        "<h2>Where the time goes</h2>" + _png(charts.breakdown_png(df), "time and utilisation by stage"),
    ]
    for param in swept:
        parts.append(
            f"<h3>Against {html.escape(param)} (workload argument swept)</h3>"
            + _png(charts.sweep_png(df, param, swept), f"against {param}")
        )
    said: dict[str, list[str]] = {}
    for run in runs:
        for note in run.get("notes", []):
            said.setdefault(note, []).append(run["run_id"])
    parts += [
        f"<p class='warn'>{html.escape(', '.join(ids) if len(ids) < len(runs) or len(runs) == 1 else 'every run')}: "
        f"{html.escape(n)}</p>"
        for n, ids in said.items()
    ]
    return page(title, parts)


def _quote(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in argv)


def write_html(path: str | Path, text: str) -> None:
    """Write a page atomically: a killed job never leaves a half-written report."""
    files.write_text(path, text)
