"""The report's charts, as PNG bytes: the roofline (kernels or stages against the peaks), where the time goes
across runs, and the numbers against a swept parameter."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd

from nsightflow import units
from nsightflow.records import Peaks

# What the sweep charts plot, with their axis labels.
SWEEP_METRICS = {
    "gpu_busy_ms": "busy time (ms)",
    "mfu_busy": "MFU on busy (%)",
    "dram_bw_util_busy": "DRAM BW util on busy (%)",
    "bw_util_busy_model": "BW util, operator bytes (%)",
}


# One colour per stage, the same in every chart of a page (by the stage's place in the page's order), and a
# compute/memory pair that no stage takes.
STAGE_COLOURS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728")
COMPUTE_COLOUR, MEMORY_COLOUR = "#1f77b4", "#ff7f0e"


def stage_colours(stages: list[str]) -> dict[str, str]:
    """Each stage's colour, by its first place in ``stages``."""
    order = list(dict.fromkeys(stages))
    return {s: STAGE_COLOURS[i % len(STAGE_COLOURS)] for i, s in enumerate(order)}


def roofline_png(
    kernels: pd.DataFrame,
    pk: Peaks,
    title: str,
    x_label: str = "arithmetic intensity (FLOP / DRAM byte)",
    y_label: str = "achieved FLOP/s (on busy time)",
    order: list[str] | None = None,
) -> bytes:
    """Log-log roofline: DRAM and compute roofs, one point per captured kernel (intensity vs achieved rate)."""
    pts = kernels.dropna(subset=["arithmetic_intensity", "achieved_flops_per_s"])
    pts = pts[(pts["arithmetic_intensity"] > 0) & (pts["achieved_flops_per_s"] > 0)]
    fig, ax = _figure(7, 4.5, 110)
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
    colours = stage_colours(list(order or []) + list(pts["stage"]))
    for stage, g in pts.groupby("stage", sort=False):
        ax.scatter(
            g["arithmetic_intensity"],
            g["achieved_flops_per_s"],
            s=18 + 60 * g["share"],
            label=stage,
            alpha=0.8,
            color=colours[stage],
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    # Fixed margins, room for the axis labels and the title (tight_layout measured every tick label of both log
    # axes: about 0.3 s of the run page's job, more than drawing the chart).
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.92)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _figure(width: float, height: float, dpi: int, **kw: Any) -> tuple[Any, Any]:
    """A figure and its axes drawn by Agg, without pyplot (no GUI backend, no figure registry to close)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(**kw)


def figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def step_walls_png(every: dict[str, list[float]], apart: dict[str, list[int]]) -> bytes:
    """Each stage's wall time per step of the program's timed run (log scale), the warm-up steps set apart drawn
    hollow: a user sees compilation and cold caches beside the steady state."""
    fig, ax = _figure(7, 3.2, 110)
    colours = stage_colours(list(every))
    for stage, walls in every.items():
        skip = set(apart.get(stage, []))
        steady = [(i, w * 1e3) for i, w in enumerate(walls) if i not in skip]
        warm = [(i, w * 1e3) for i, w in enumerate(walls) if i in skip]
        c = colours[stage]
        ax.plot([i for i, _ in steady], [w for _, w in steady], "o-", color=c, ms=3, lw=1, label=stage)
        if warm:
            ax.scatter([i for i, _ in warm], [w for _, w in warm], facecolors="none", edgecolors=c, s=30)
    ax.set_yscale("log")
    ax.set_xlabel("step (hollow: warm-up, set apart)")
    ax.set_ylabel("wall per step (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return figure_png(fig)


def breakdown_png(df: pd.DataFrame) -> bytes:
    """Where the time goes, per run: busy time by stage (left), and per stage how close it runs to the
    compute peak (MFU) and to the bandwidth peak (right): the larger bar says which bound it is near."""
    bw = (
        "dram_bw_util_busy"
        if "dram_bw_util_busy" in df and df["dram_bw_util_busy"].notna().any()
        else "bw_util_busy_model"
    )
    runs = list(dict.fromkeys(df["run"]))
    stages = list(dict.fromkeys(df["stage"]))
    fig, (ax_t, ax_u) = _figure(12, max(2.8, 1.4 + 0.5 * max(len(runs), len(df) / 2)), 100, ncols=2)
    left = pd.Series(0.0, index=runs)
    colours = stage_colours(stages)
    for stage in stages:
        g = df[df["stage"] == stage].set_index("run")["gpu_busy_ms"].reindex(runs).fillna(0.0)
        ax_t.barh(runs, g, left=left, label=stage, color=colours[stage])
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
        color=COMPUTE_COLOUR,
    )
    ax_u.barh(
        [y + 0.2 for y in ys],
        100 * df.get(bw, pd.Series(float("nan"), index=df.index)),
        height=0.4,
        label="memory: " + ("DRAM BW util on busy" if bw == "dram_bw_util_busy" else "BW util (operator bytes)"),
        color=MEMORY_COLOUR,
    )
    ax_u.set_yticks(list(ys), labels, fontsize=8)
    ax_u.invert_yaxis()
    ax_u.set_xlabel("% of peak")
    ax_u.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2)
    for ax in (ax_t, ax_u):
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return figure_png(fig)


def sweep_png(df: pd.DataFrame, param: str, swept: list[str]) -> bytes:
    """Busy time, MFU and bandwidth utilisation against one swept parameter, a line per stage and other values."""
    metrics = [c for c in SWEEP_METRICS if c in df and df[c].notna().any()]
    fig, axes = _figure(4.2 * len(metrics), 3.6, 100, ncols=len(metrics), squeeze=False)
    others = [p for p in swept if p != param]
    colours = stage_colours(list(df["stage"]))
    styles = ["-", "--", ":", "-."]  # a stage's colour; other workloads and swept values by line style
    lines: dict[str, int] = {}
    for keys, g in df[df[param].notna()].groupby(["workload", "stage"] + others, dropna=False, sort=False):
        g = g.sort_values(param)
        workload, stage, *rest = keys
        style = styles[lines.setdefault(str(stage), 0) % len(styles)]
        lines[str(stage)] += 1
        label = f"{workload} {stage}" + "".join(f", {p}={v}" for p, v in zip(others, rest, strict=True))
        xs = g[param] if pd.api.types.is_numeric_dtype(g[param]) else g[param].astype(str)
        for ax, m in zip(axes[0], metrics, strict=True):
            scale = 1.0 if m == "gpu_busy_ms" else 100.0
            ax.plot(xs, scale * g[m], marker="o", label=label, color=colours[stage], linestyle=style)
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
    return figure_png(fig)


def experts_png(tokens: pd.DataFrame, title: str) -> bytes:
    """Tokens per expert (columns) per routing (rows) of one stage, averaged over its steps: a balanced router
    paints an even field, a hot expert a bright column."""
    fig, ax = _figure(min(9.0, 2.5 + 0.25 * tokens.shape[1]), min(6.0, 1.2 + 0.25 * tokens.shape[0]), 110)
    image = ax.imshow(tokens.to_numpy(dtype=float), aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("expert")
    ax.set_ylabel("routing (MoE layer)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="tokens (mean over steps)")
    return figure_png(fig)
