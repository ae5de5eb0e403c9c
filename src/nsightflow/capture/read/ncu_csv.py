"""Nsight Compute's raw CSV exports (``ncu --import --page raw --csv``) as DataFrames, read strictly.

Units are taken from the export's units row (auto units such as ``us``, ``Mbyte``, ``Ghz`` or base units
with ``--print-units base``), thousands separators are removed, and a cell that cannot be read is NaN
(lost coverage downstream), never a zero. NVTX cells are parsed into their ranges and payloads.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsightflow.errors import InputError
from nsightflow.ncu_metrics import (
    BYTE_METRICS,
    DEFAULT_METRICS,
    PEAK_METRICS,
    SASS_FLOP_METRICS,
    TENSOR_FLOP_METRICS,
    TIME_METRICS,
    metric_kind,
)

_NVTX_ENTRY = re.compile(
    r'"(?P<domain>[^"]*?):(?P<range>[^"]*):(?P<pltype>[^:"]*):(?P<plvalue>[^:"]*):'
    r'(?P<clrtype>[^:"]*):(?P<color>[^:"]*):(?P<msgtype>[^:"]*):(?P=range)"'
)


def parse_nvtx(cell: str) -> list[dict[str, Any]]:
    """The push/pop stack of an ncu NVTX cell, outermost first.

    A cell reads like ``642  "nsightflow:decode:Int64:3:RGB:0xff:REGISTERED:decode" ``:
    thread id, then per range domain:name:payload type:payload:colour type:colour:message type:name.
    """
    out = []
    for m in _NVTX_ENTRY.finditer(cell or ""):
        payload = m.group("plvalue")
        domain = m.group("domain")
        out.append(
            {
                "domain": "" if domain == "<default domain>" else domain,
                "range": m.group("range"),
                "payload": int(payload) if re.fullmatch(r"-?\d+", payload or "") else None,
            }
        )
    return out


def _number(cell: str) -> float:
    cell = (cell or "").strip().replace(",", "")
    if cell in ("", "n/a", "no data", "N/A", "(!) n/a"):
        return np.nan
    try:
        return float(cell)
    except ValueError:
        return np.nan


_PREFIX = {"n": -9, "u": -6, "m": -3, "": 0, "K": 3, "M": 6, "G": 9, "T": 12, "P": 15}  # powers of ten
_UNIT_BASES = {
    "byte": 0,
    "second": 0,
    "s": 0,
    "ns": -9,
    "hz": 0,
    "inst": 0,
    "warp": 0,
    "cycle": 0,
    "thread": 0,
    "sector": 0,
    "request": 0,
    "block": 0,
    "register": 0,
    "wavefront": 0,
}


def _unit_exponent(unit: str) -> tuple[int, bool] | None:
    """(power of ten to SI base units, is a plain time), exact integers; None when not understood."""
    unit = unit.strip()
    if unit in ("", "%"):
        return 0, False
    if "/" in unit:
        num, _, den = unit.partition("/")
        a, b = _unit_exponent(num), _unit_exponent(den)
        return None if a is None or b is None else (a[0] - b[0], False)
    for base in sorted(_UNIT_BASES, key=len, reverse=True):
        prefix = unit[: len(unit) - len(base)]
        if unit.lower().endswith(base) and prefix in _PREFIX:
            return _PREFIX[prefix] + _UNIT_BASES[base], base in ("second", "s", "ns")
    return None


_KIND_BASES = {"time": ("second", "s", "ns"), "frequency": ("hz",), "bytes": ("byte",), "count": ("", "inst")}


def unit_kind(unit: str) -> str | None:
    """What an ncu unit measures ('time', 'frequency', 'bytes', 'count', or those per cycle); None if unknown.
    Tensor-pipe FLOP counters and their peaks print no unit: a plain count."""
    unit = unit.strip()
    if unit.endswith("/cycle"):
        inner = unit_kind(unit.removesuffix("/cycle"))
        return f"{inner}/cycle" if inner in ("bytes", "count") else None
    if unit in ("", "%"):
        return "count"
    for kind, bases in _KIND_BASES.items():
        for base in bases:
            prefix = unit[: len(unit) - len(base)] if base else unit
            if unit.lower().endswith(base) and prefix in _PREFIX:
                return kind
    return None


def unit_factor(unit: str) -> tuple[float, bool] | None:
    """(factor to SI base units, is a plain time) for an ncu unit such as 'Mbyte', 'usecond', 'Ghz', 'byte/cycle'.

    ``None`` when the unit is not understood. Prefixes are decimal (K = 1e3), as ncu's auto units print.
    """
    exp = _unit_exponent(unit)
    return None if exp is None else (10.0 ** exp[0], exp[1])


EXPORT = "export it again with: ncu --import R.ncu-rep --page raw --csv --print-units base"


def parse_raw_csv(source: str | Path, name: str | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """Parse ``ncu --import R --page raw --csv`` output: (one row per result, units per column as printed).

    Metric columns (names with ``__``) become floats in base units (bytes, ns, hz: auto-scaled
    units such as ``Mbyte`` or ``usecond`` are converted) with thousands separators removed and
    ``n/a``/``no data`` as NaN; the NVTX push/pop column becomes ``nvtx_stack`` (every range, outermost
    first) and ``nvtx_domain``, ``nvtx_range`` and ``nvtx_payload`` of the innermost range.

    Refused, naming the file (``name``, else the path), the result and the column: a unit that does not measure
    what its metric counts (a column relabelled or swapped), a negative count, time or byte total, a result ID
    twice. ``source``: a path, or the export's text.
    """
    text = Path(source).read_text() if isinstance(source, Path) or "\n" not in str(source) else str(source)
    where = name or (str(source) if isinstance(source, Path) or "\n" not in str(source) else "ncu raw CSV")
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and not (len(r) == 1 and r[0].startswith("=="))]
    if len(rows) < 2 or "Kernel Name" not in rows[0] or "ID" not in rows[0]:
        raise InputError(
            f"{where}: not an ncu raw CSV export (expected a header with 'ID' and 'Kernel Name', then a units "
            "row); make it with: ncu --import R.ncu-rep --page raw --csv --print-units base"
        )
    header, units = rows[0], rows[1]
    if len(units) != len(header):
        raise InputError(f"{where}: the units row does not match the header (truncated file?)")
    body = [r for r in rows[2:] if len(r) == len(header)]
    if len(body) != len(rows) - 2:
        raise InputError(f"{where}: {len(rows) - 2 - len(body)} rows have the wrong number of cells (truncated file?)")
    ids = [r[header.index("ID")] for r in body]
    not_ids = [i for i in ids if not i.strip().isdigit()]
    if not_ids:
        raise InputError(
            f"{where}: result ID(s) {not_ids[:5]!r} are not numbers (ncu numbers its results 0, 1, 2, ...): the file "
            f"was edited or is not ncu's; {EXPORT}"
        )
    twice = sorted({i for i in ids if ids.count(i) > 1}, key=lambda i: ids.index(i))
    if twice:
        raise InputError(
            f"{where}: result ID(s) {twice[:5]} appear more than once: rows were copied or two exports joined; "
            f"each result counts once, so {EXPORT}"
        )
    columns: dict[str, list[Any]] = {}
    for i, col in enumerate(header):
        cells = [r[i] for r in body]
        if "__" not in col:
            columns[col] = cells
            continue
        # Auto units (no --print-units base) scale per column: bring every metric to bytes, ns, hz, ...
        exp = _unit_exponent(units[i])
        if col in DEFAULT_METRICS:
            kind, want = unit_kind(units[i]), metric_kind(col)
            if exp is None or kind is None:
                raise InputError(
                    f"{where}: column {col!r} has unit {units[i]!r}, which nsightflow does not know; {EXPORT}"
                )
            if kind != want:
                raise InputError(
                    f"{where}: column {col!r} counts {want} but its unit is {units[i]!r} ({kind}): the header and "
                    f"the units row disagree (a column relabelled or two swapped); {EXPORT}"
                )
        elif exp is None:
            exp = (0, False)  # a column nsightflow does not read (e.g. launch__* counts of 'cluster'): as printed
        scale = 10.0 ** (exp[0] + (9 if exp[1] else 0))  # plain times in ns
        columns[col] = [_number(v) * scale for v in cells]
        if col in DEFAULT_METRICS:
            bad = [(ids[k], v) for k, v in enumerate(columns[col]) if v < 0]
            if bad:
                raise InputError(
                    f"{where}: result ID {bad[0][0]}, column {col!r}: {cells[ids.index(bad[0][0])]!r} is negative; a "
                    f"count, time or byte total cannot be ({len(bad)} such cells): the file was edited; {EXPORT}"
                )
    _check_hierarchy(columns, ids, where)
    nvtx_col = next((c for c in header if "Push/Pop_Range" in c), None)
    stacks = [parse_nvtx(v) for v in columns[nvtx_col]] if nvtx_col else [[] for _ in body]
    columns["nvtx_stack"] = stacks
    columns["nvtx_domain"] = [s[-1]["domain"] if s else None for s in stacks]
    columns["nvtx_range"] = [s[-1]["range"] if s else None for s in stacks]
    columns["nvtx_payload"] = [s[-1]["payload"] if s else None for s in stacks]
    df = pd.DataFrame(columns)
    df["ID"] = df["ID"].astype(int)
    return df, dict(zip(header, units, strict=True))


DRAM_BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
L2_BYTES = "lts__t_bytes.sum"


def _check_hierarchy(columns: dict[str, list[Any]], ids: list[str], where: str) -> None:
    """Every byte to or from DRAM passes through L2 (the point of coherence), so a result's DRAM bytes never exceed
    its L2 bytes (in the committed H100 and H200 captures they are at most 0.68 of them): more means two byte
    columns' headers were exchanged or a cell edited. Refused, naming the result."""
    if L2_BYTES not in columns or not all(c in columns for c in DRAM_BYTES):
        return
    for k, rid in enumerate(ids):
        dram = sum(float(columns[c][k]) for c in DRAM_BYTES)
        l2 = float(columns[L2_BYTES][k])
        if np.isfinite(dram) and np.isfinite(l2) and dram > 1.01 * l2 + 1024:
            raise InputError(
                f"{where}: result ID {rid}: {dram:.4g} DRAM bytes but {l2:.4g} L2 bytes, while every DRAM byte "
                f"passes through L2: two byte columns' headers were exchanged or a cell edited; {EXPORT}"
            )


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A metric column as floats: NaN where the metric was not collected or a cell had no data
    (never a zero: a missing count must not read as "nothing happened")."""
    if name not in df.columns:
        return pd.Series(np.nan, index=df.index)
    return pd.to_numeric(df[name], errors="coerce")


def result_metrics(raw: pd.DataFrame) -> pd.DataFrame:
    """Per ncu result of a parsed export: duration, FLOPs by precision (FMA = 2), bytes per memory level, clocks
    and per-cycle peaks, under nsightflow's own names (ncu_id, ncu_kernel, grid, block, flops_tensor_<p>,
    flops_<p>, flops_tensor, flops, dram_bytes, l2_bytes, l1_bytes, ...)."""
    out = pd.DataFrame(index=raw.index)
    out["ncu_id"] = raw["ID"]
    out["ncu_kernel"] = raw["Kernel Name"]
    out["grid"] = raw.get("Grid Size")
    out["block"] = raw.get("Block Size")
    out["nvtx_range"] = raw.get("nvtx_range")
    out["nvtx_payload"] = raw.get("nvtx_payload")
    out["nvtx_stack"] = raw.get("nvtx_stack")
    for key, metric in TIME_METRICS.items():
        out[key] = _col(raw, metric)
    for prec, metric in TENSOR_FLOP_METRICS.items():
        out[f"flops_tensor_{prec}"] = _col(raw, metric)
    for prec, pairs in SASS_FLOP_METRICS.items():
        out[f"flops_{prec}"] = sum(_col(raw, m) * k for m, k in pairs)
    # Precisions not collected are not summed (the capture collects those the workload's operators use, see
    # nsightflow.ncu_metrics.seen_precisions); a collected n/a cell makes the sum NaN.
    tensor_cols = [f"flops_tensor_{p}" for p, m in TENSOR_FLOP_METRICS.items() if m in raw.columns]
    out["flops_tensor"] = out[tensor_cols].sum(axis=1, skipna=False) if tensor_cols else np.nan
    out["flops"] = out[["flops_tensor"] + [f"flops_{p}" for p in SASS_FLOP_METRICS]].sum(axis=1, skipna=False)
    out["dram_bytes"] = _col(raw, BYTE_METRICS["dram_read"]) + _col(raw, BYTE_METRICS["dram_write"])
    out["l2_bytes"] = _col(raw, BYTE_METRICS["l2"])
    out["l1_bytes"] = _col(raw, BYTE_METRICS["l1"])
    for key, metric in PEAK_METRICS.items():
        out[key] = _col(raw, metric)
    return out


def details_argv(ncu: str, report: str | Path) -> list[str]:
    """The details page (every section's table and ncu's rule messages), as text."""
    return [ncu, "--import", str(report), "--page", "details", "--print-details", "all"]


def export_argv(ncu: str, report: str | Path) -> list[str]:
    """Raw page as CSV in base units (bytes, ns), one row per profiled result, kernels named by their mangled
    names: the one spelling nsys prints identically (nsightflow.capture.read.matching)."""
    return [ncu, "--import", str(report), "--page", "raw", "--csv", "--print-units", "base"] + [
        "--print-kernel-base",
        "mangled",
    ]
