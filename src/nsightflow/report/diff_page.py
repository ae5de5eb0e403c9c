"""The page comparing two runs (nsightflow.analysis.diff): a headline sentence per stage, the stages side by side,
the kernels that were added, removed or changed."""

from __future__ import annotations

import html

from nsightflow.analysis.diff import kernel_diff, stage_diff, summary_lines
from nsightflow.analysis.runfiles import Run
from nsightflow.report.headline import short_kernel
from nsightflow.report.pages import on_cpu, page
from nsightflow.report.tables import table


def render_diff(before: Run, after: Run, title: str = "nsightflow diff") -> str:
    stages = stage_diff(before["stages"], after["stages"])
    kernels = kernel_diff(before["kernels"], after["kernels"])
    kernels = kernels.assign(kernel=[short_kernel(k) for k in kernels["kernel"]])
    names = f"{html.escape(before['run_id'])} → {html.escape(after['run_id'])}"
    cpu = all(on_cpu(r["manifest"]) for r in (before, after))
    noun = "operators" if cpu else "kernels"
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines(stages))
    stage_cols = {"stage": ("stage", "text"), "presence": ("in", "text")}
    for col, (header, kind) in {
        "wall_ms": ("wall ms", "ms"),
        "gpu_busy_ms": ("busy ms", "ms"),
        "mfu_busy": ("MFU on busy", "pct"),
        "dram_bw_util_busy": ("DRAM use on busy", "pct"),
        "bw_util_busy_model": ("BW util (operator bytes) on busy", "pct"),
        "bound": ("bound", "text"),
    }.items():
        if f"{col}_before" in stages:
            stage_cols[f"{col}_before"] = (f"{header} before", kind)
            stage_cols[f"{col}_after"] = (f"{header} after", kind)
        if f"{col}_change" in stages:
            stage_cols[f"{col}_change"] = (f"{header} change", "pct")
    kernel_cols = {
        "stage": ("stage", "text"),
        "kernel": (noun[:-1], "text"),
        "status": ("status", "text"),
        "instances_before": ("launches before", "count"),
        "instances_after": ("launches after", "count"),
        "total_ns_before": ("ms before", "ns_as_ms"),
        "total_ns_after": ("ms after", "ns_as_ms"),
        "delta_ns": ("change ms", "ns_as_ms"),
    }
    return page(
        title,
        [
            f"<h2>{names}</h2><ul class='advice'>{lines}</ul>",
            "<h3>Stages</h3>" + table(stages, stage_cols, cls="stages"),
            f"<h3>{noun.capitalize()}, largest change of {'CPU' if cpu else 'GPU'} time first</h3>"
            + table(kernels[kernels["status"] != "same"].head(40), kernel_cols, cls="kernels"),
        ],
    )
