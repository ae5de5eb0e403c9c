"""The report's pages, written in one job: every run's page, then the index that compares the runs.

One job rather than one per page: on the GPU host a job spends about 1 s starting its interpreter and importing pandas
and matplotlib before it renders anything, more than a page takes to render (measured in the benchmark's job table);
so a change that reruns one page reruns the others with it, each a fraction of a second."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsightflow.analysis.cards import read_cards
from nsightflow.analysis.runfiles import load_run, read_table
from nsightflow.records import Summary
from nsightflow.report.pages import render_index, render_run, write_html


@dataclass(frozen=True)
class RunPage:
    """One run's page: the files its backend wrote, where the page goes, and what the page says made it."""

    run_id: str
    name: str
    point: dict[str, Any]  # the sweep point (swept workload arguments)
    kernels: str
    stages: str
    summary: str
    manifest: str
    settings: dict[str, Any]  # every config value that shaped the run's numbers
    page: str
    cards: str | None = None  # deep-dive cards, where config ncu.deep_dive asked for them


def write_report(
    runs: list[RunPage], index: str | Path, backend: str, reason: str, title: str = "nsightflow report"
) -> list[str]:
    """Write each run's page and the index (``results/report.html``); return a line per page for the job's log."""
    said, rows = [], []
    for r in runs:
        run: dict[str, Any] = dict(load_run(r.run_id, r.kernels, r.stages, r.summary, r.manifest))
        if r.cards:
            run["cards"] = read_cards(r.cards)
        write_html(r.page, render_run(run, backend, reason, r.settings, title))
        said.append(f"run page {r.run_id}: {len(run['stages'])} stages, {len(run['kernels'])} kernels")
        stages, notes = read_table(r.stages), Summary.read(r.summary).notes()
        rows.append({"run_id": r.run_id, "name": r.name, "point": r.point, "stages": stages, "notes": notes})
    write_html(index, render_index(rows, backend, reason, title))
    return said + [f"report of {len(runs)} runs, backend {backend}"]
