"""Analysis of captures made elsewhere: recognise the files by content, normalise them, match ncu to nsys.

A directory may hold an nsys SQLite export (stages attributed by time window, as in a run of
nsightflow), nsys stats CSV exports (times only, when there is no SQLite export), ncu raw CSV exports
(with or without ``--print-units base``), nsightflow's own ``analytic_flops.json``, and binary reports
(``.nsys-rep``/``.ncu-rep``, exported first when the tool is installed). Exports are recognised by
what they contain, never by their names; binary reports by their suffix (their format is opaque).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from nsightflow import files
from nsightflow.capture.read import ncu_csv
from nsightflow.errors import CapturesError
from nsightflow.records import CapturesIndex

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_STATS_CMD = "nsys stats --report nvtx_sum --report nvtx_kern_sum --format csv -o PREFIX REPORT.nsys-rep"
NSYS_SQLITE_CMD = "nsys export --type sqlite -o REPORT.sqlite REPORT.nsys-rep"
NCU_EXPORT_CMD = (
    "ncu --import REPORT.ncu-rep --page raw --csv --print-units base --print-kernel-base mangled > REPORT.raw.csv"
)


def captures_run_id(directory: str) -> str:
    """The run id of an analysed directory: ``captures/<folder name>``."""
    name = files.safe_name(Path(directory).resolve().name, "captures")
    return f"captures/{name}"


def _csv_header(text: str) -> list[str]:
    for row in csv.reader(io.StringIO(text[:20000])):
        if len(row) > 2:
            return row
    return []


def classify(path: Path) -> str | None:
    """What a file is, from its content: nvtx_sum, nvtx_kern_sum, cuda_gpu_kern_sum, sqlite, ncu_raw,
    analytic_flops, torch_trace; nsys_rep / ncu_rep by suffix; None for anything else."""
    if path.suffix == ".nsys-rep":
        return "nsys_rep"
    if path.suffix == ".ncu-rep":
        return "ncu_rep"
    with path.open("rb") as fh:
        head = fh.read(16)
    if head == SQLITE_MAGIC:
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"} <= tables:
                    con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        except sqlite3.Error:
            return "sqlite_unreadable"
        return "sqlite" if {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"} <= tables else None
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        if isinstance(data, dict) and "traceEvents" in data:
            return "torch_trace"
        if (
            isinstance(data, dict)
            and isinstance(data.get("stages"), dict)
            and all(isinstance(v, dict) and "flops" in v for v in data["stages"].values())
        ):
            return "analytic_flops"
        return None
    header = set(_csv_header(text))
    if {"ID", "Kernel Name"} <= header and any("__" in h for h in header):
        return "ncu_raw"
    if {"NVTX Range", "Kern Inst", "Kernel Name", "Total Time (ns)"} <= header:
        return "nvtx_kern_sum"
    if {"Range", "Instances", "Total Time (ns)"} <= header:
        return "nvtx_sum"
    if {"Name", "Instances", "Total Time (ns)"} <= header:
        return "cuda_gpu_kern_sum"
    return None


def _one(found: dict[str, list[Path]], kind: str) -> Path | None:
    paths = found.get(kind, [])
    if len(paths) > 1:
        raise CapturesError(f"several {kind} files: {', '.join(map(str, paths))}; keep one capture per directory")
    return paths[0] if paths else None


def import_captures(
    directory: str | Path,
    out_dir: str | Path,
    nsys_bin: str = "nsys",
    ncu_bin: str = "ncu",
    log: str | Path | None = None,
) -> CapturesIndex:
    """Recognise and normalise a captures directory into ``out_dir``; returns the index of what was found.

    Layout written: stats/{nvtx_sum,nvtx_kern_sum}.csv, timeline.sqlite, ncu/<n>.raw.csv,
    analytic_flops.json (when given), index.json. A failed import leaves no partial output behind.
    """
    directory, out_dir = Path(directory), Path(out_dir)
    if not directory.is_dir():
        raise CapturesError(f"captures directory {directory} does not exist")
    found: dict[str, list[Path]] = {}
    unknown: list[Path] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        kind = classify(path)
        (found.setdefault(kind, []) if kind else unknown).append(path)
    if found.get("sqlite_unreadable"):
        raise CapturesError(
            f"{found['sqlite_unreadable'][0]}: an SQLite database that cannot be read (corrupt or cut "
            f"short); export it again with: {NSYS_SQLITE_CMD}"
        )
    tmp = files.staging(out_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "stats").mkdir(parents=True)
    (tmp / "ncu").mkdir()
    try:
        return _import(
            directory, out_dir, tmp, found, unknown, nsys_bin, ncu_bin, Path(log) if log else tmp / "import.log"
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed import leaves nothing behind
        raise


def _import(
    directory: Path,
    out_dir: Path,
    tmp: Path,
    found: dict[str, Any],
    unknown: list[Any],
    nsys_bin: str,
    ncu_bin: str,
    log: Path,
) -> CapturesIndex:
    from nsightflow.capture.launch.backend import found as tool_found
    from nsightflow.capture.launch.tools import run_tool, stats
    from nsightflow.errors import ToolError

    kern_sum, nvtx_sum, sqlite = _one(found, "nvtx_kern_sum"), _one(found, "nvtx_sum"), _one(found, "sqlite")
    rep = _one(found, "nsys_rep")
    if (kern_sum is None or nvtx_sum is None or sqlite is None) and rep is not None:
        if not tool_found(nsys_bin):
            raise CapturesError(
                f"{rep} needs exporting and nsys is not installed here; on a machine with nsys run: "
                f"{NSYS_STATS_CMD} (it writes the SQLite export beside the report too)"
            )
        try:
            stats(nsys_bin, rep, tmp / "exported", tmp / "timeline.sqlite", log)
        except ToolError as exc:
            raise CapturesError(f"exporting {rep} failed: {exc}") from exc
        kern_sum, nvtx_sum = tmp / "exported" / "nvtx_kern_sum.csv", tmp / "exported" / "nvtx_sum.csv"
        sqlite = tmp / "timeline.sqlite"
    if sqlite is None and (kern_sum is None or nvtx_sum is None):
        raise CapturesError(
            f"{directory}: no timeline: neither an nsys SQLite export nor the nsys stats CSV exports "
            f"of nvtx_sum and nvtx_kern_sum were recognised (files seen: "
            f"{len(unknown) + sum(map(len, found.values()))}); make them with: {NSYS_SQLITE_CMD} "
            f"(or, for times only: {NSYS_STATS_CMD})"
        )
    for src, name in ((kern_sum, "nvtx_kern_sum.csv"), (nvtx_sum, "nvtx_sum.csv")):
        if src is not None:
            shutil.copy(src, tmp / "stats" / name)
    exports = list(found.get("ncu_raw", []))
    # Raw exports given: they are the ncu data (reports beside them are not exported again, whatever
    # their names). None given: every .ncu-rep is exported, which needs ncu here.
    for rep_path in [] if exports else found.get("ncu_rep", []):
        if not tool_found(ncu_bin):
            raise CapturesError(
                f"{rep_path} has no raw CSV export and ncu is not installed here; on a machine with "
                f"ncu run: {NCU_EXPORT_CMD.replace('REPORT', rep_path.name.removesuffix('.ncu-rep'))}"
            )
        out, _ = run_tool(ncu_csv.export_argv(ncu_bin, rep_path), log)
        made = tmp / f"{rep_path.name.removesuffix('.ncu-rep')}.exported.raw.csv"
        made.write_text(out)
        exports.append(made)
    if exports and sqlite is None:
        raise CapturesError(
            f"{directory}: ncu exports need the timeline's SQLite export to match launches to "
            f"stages and steps; make it with: {NSYS_SQLITE_CMD}"
        )
    if sqlite is not None and sqlite != tmp / "timeline.sqlite":
        shutil.copy(sqlite, tmp / "timeline.sqlite")
    for i, export in enumerate(sorted(exports)):
        ncu_csv.parse_raw_csv(export)  # fails here, naming the file, when an export is malformed
        shutil.copy(export, tmp / "ncu" / f"{i:03d}.raw.csv")
    flops = _one(found, "analytic_flops")
    if flops:
        shutil.copy(flops, tmp / "analytic_flops.json")
    index = CapturesIndex(
        directory=str(directory.resolve()),
        recognised={k: [str(p) for p in v] for k, v in found.items()},
        ignored=[str(p) for p in unknown],
        exports=[str(e) for e in sorted(exports)],
    )
    index.write(tmp / "index.json")
    shutil.rmtree(tmp / "exported", ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.replace(out_dir)
    return index
