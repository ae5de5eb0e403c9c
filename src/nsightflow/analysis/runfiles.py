"""What a run produces for the report, in one place: ``kernels.csv``, ``stages.csv``, ``summary.json``
(written by the aggregate rules) and the run as the report reads it back (with ``manifest.json``).

Every backend (nsight, torch, captures) writes the same files, so the report never asks which one ran:
- ``kernels.csv``: one row per (stage, kernel or operator): rank, top-N flag, launches, launches per step,
  classes and profiled launches (nsight), busy ns from the timeline, share of the stage, and where
  counters exist FLOPs, DRAM/L2/L1 bytes per launch, intensity, achieved rate and utilisations.
- ``stages.csv``: one row per stage: ranges, wall and busy ms, coverage, FLOPs (ncu: in all and by the class
  of the operator that launched each kernel; model: in all and by class), MFU and
  HFU on wall and busy time, DRAM bytes and bandwidth utilisation, the same against measured ceilings.
- ``experts.csv``: a mixture of experts' routing, one row per (stage, step, routing): tokens per expert and their
  imbalance (nsightflow.analysis.experts); only its header for a model without grouped GEMMs.
- ``steps.csv``: a command's every step: wall, model FLOPs and bytes, MFU and bandwidth on wall, batch mix
  (nsightflow.analysis.steps); only its header for a callable.
- ``summary.json``: peaks (with their sources), notes, diagnostics, profiler commands, and for a job of several
  processes its per-rank table (nsightflow.analysis.ranks: one row per rank and stage).
Every column, with its header, format and meaning: nsightflow.columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pandas as pd

from nsightflow import columns, files
from nsightflow.analysis.aggregate import RunTables
from nsightflow.records import Diagnostic, Manifest, Peaks, Summary


class Run(TypedDict):
    """One run as the report reads it."""

    run_id: str
    kernels: pd.DataFrame
    stages: pd.DataFrame
    peaks: Peaks
    manifest: Manifest
    diagnostics: list[Diagnostic]  # notes (level 'note') and diagnostics
    commands: list[dict[str, Any]]
    ranks: pd.DataFrame
    experts: pd.DataFrame  # an MoE's routing (nsightflow.analysis.experts), empty otherwise
    steps: pd.DataFrame  # a command's every step (nsightflow.analysis.steps), empty otherwise


def read_table(path: str | Path) -> pd.DataFrame:
    """A run's CSV table as written: stage and kernel names stay strings whatever they read like ('NA', 'nan',
    '1', 'True'); only empty cells are missing values (pandas writes NaN as an empty cell)."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"stage": str, "kernel": str})


def in_order(table: str, df: pd.DataFrame) -> pd.DataFrame:
    """``df``'s columns in the registry's order (nsightflow.columns); a column the registry lacks is a programming
    error: every column a reader sees has a header, a format and a definition."""
    unknown = [c for c in df.columns if c not in columns.names(table)]
    if unknown:
        raise AssertionError(f"{table}.csv: column(s) {unknown} are not in nsightflow.columns; register them")
    return df[[c for c in columns.names(table) if c in df.columns]]


@dataclass(frozen=True)
class RunFiles:
    """Where an aggregate rule writes a run's tables (its named ``output``s, one per table, and the summary)."""

    kernels: str | Path
    stages: str | Path
    ranks: str | Path
    experts: str | Path
    steps: str | Path
    summary: str | Path

    @classmethod
    def of(cls, output: Any) -> RunFiles:
        """A rule's named outputs."""
        return cls(output.kernels, output.stages, output.ranks, output.experts, output.steps, output.summary)


def write_run(agg: RunTables, out: RunFiles, commands: list[dict[str, Any]], diagnostics: list[Diagnostic]) -> None:
    """The run's tables as CSV (for pandas and diffs; ``ranks``: a row per rank and stage of a job of several
    processes, ``experts``: a row per routing of an MoE's grouped GEMMs, only their headers otherwise) and its peaks,
    notes and diagnostics (one list: the notes first) and commands as JSON (nsightflow.records.Summary).

    Each file is written beside its target and moved into place, so a killed job leaves none half-written.
    """
    tables = (
        ("kernels", agg.kernels, out.kernels),
        ("stages", agg.stages, out.stages),
        ("ranks", agg.ranks, out.ranks),
        ("experts", agg.experts, out.experts),
        ("steps", agg.steps, out.steps),
    )
    for table, df, path in tables:
        tmp = files.staging(path)
        in_order(table, df).to_csv(tmp, index=False)
        files.publish(tmp, path)
    ranks = _records(in_order("ranks", agg.ranks)) if len(agg.ranks) else []
    Summary(agg.peaks, agg.notes + diagnostics, commands, ranks).write(out.summary)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as JSON objects, a missing value as null (never NaN, which JSON has not)."""
    return [{str(k): (None if pd.isna(v) else v) for k, v in row.items()} for row in df.to_dict("records")]


def load_run(
    run_id: str,
    kernels_csv: str | Path,
    stages_csv: str | Path,
    summary_json: str | Path,
    manifest_json: str | Path,
    experts_csv: str | Path | None = None,
    steps_csv: str | Path | None = None,
) -> Run:
    """A run as the report wants it, from the files its backend wrote (``experts_csv``, ``steps_csv``: none for an
    older run)."""
    summary = Summary.read(summary_json)
    manifest = Manifest.read(manifest_json)
    return Run(
        **{
            "run_id": run_id,
            "kernels": read_table(kernels_csv),
            "stages": read_table(stages_csv),
            "peaks": summary.peaks,
            "manifest": manifest,
            "diagnostics": summary.diagnostics,
            "commands": list(manifest.commands) + summary.commands,
            "ranks": pd.DataFrame(summary.ranks, columns=columns.names("ranks")),
            "experts": read_table(experts_csv) if experts_csv else pd.DataFrame(columns=columns.names("experts")),
            "steps": read_table(steps_csv) if steps_csv else pd.DataFrame(columns=columns.names("steps")),
        }
    )
