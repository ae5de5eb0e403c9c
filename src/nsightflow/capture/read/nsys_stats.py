"""Nsight Systems' stats CSV exports as DataFrames, for captures made elsewhere that come without a SQLite export
(nsightflow.capture.read.attribution reads that):
- ``kernel_table``: GPU time and instances per (NVTX stage, kernel), from ``nvtx_kern_sum`` (nsys
  attributes per thread: a backward stage's autograd kernels are not in it);
- ``stage_table``: wall time and instances per NVTX range, from ``nvtx_sum``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from nsightflow.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

MIN_KERNEL_NS = 100  # the shortest kernels nsys records on H100/H200 take about 1 µs


def split_range(label: str) -> tuple[str, str]:
    """``'domain:name'`` as nsys stats prints a range → (domain, name); ``''`` domain for the default one."""
    import pandas as pd

    label = "" if pd.isna(label) else str(label)
    if ":" in label:
        domain, name = label.split(":", 1)
        return domain, name
    return "", label


def _read_csv(
    path: str | Path, required: list[str], what: str, numeric: list[str], shown: str | None = None
) -> pd.DataFrame:
    """A stats CSV with its columns checked and its ``numeric`` columns parsed strictly: a cell that is not a
    number is an error naming the file (``shown``: the user's name for it), row and column (never a NaN that a sum
    would drop, or a zero)."""
    import pandas as pd

    source, path = Path(path), Path(shown or path)
    try:
        df = pd.read_csv(source, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError as exc:
        raise InputError(f"{path}: empty file; expected the {what} CSV from nsys stats") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: not a readable CSV ({exc}); export it again with: nsys stats --report {what} "
            "--format csv -o PREFIX REPORT.nsys-rep"
        ) from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(
            f"{path}: not an nsys stats {what} CSV: missing columns {missing} (found {list(df.columns)}). "
            f"Export it with: nsys stats --report {what} --format csv -o PREFIX REPORT.nsys-rep"
        )
    for col in numeric:
        values = pd.to_numeric(df[col].str.replace(",", "", regex=False), errors="coerce")
        bad = values.isna() | (values < 0)
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise InputError(
                f"{path}: row {row + 2}, column {col!r}: {df.loc[row, col]!r} is not a count or time "
                f"(a cut or edited {what} export?); export it again"
            )
        df[col] = values
    return df


def _no_copies(df: pd.DataFrame, key: list[str], path: str | Path, what: str) -> None:
    """nsys stats lists each (range, thread, kernel) once: a row twice was copied (its time counted twice)."""
    cols = [c for c in key if c in df.columns]
    twice = df[df.duplicated(cols, keep=False)]
    if len(twice):
        i = int(twice.index[0])
        raise InputError(
            f"{path}: rows {i + 2} and {int(twice.index[1]) + 2} are the same {', '.join(cols)}: nsys stats lists "
            f"each once, so a row was copied (its time would count twice); export the {what} CSV again"
        )


def kernel_table(nvtx_kern_sum: str | Path, shown: str | None = None) -> pd.DataFrame:
    """GPU time per (stage, kernel) for kernels launched inside NVTX ranges (``shown``: the file's name in errors).

    Columns: domain, stage, kernel, instances, total_ns, range_instances,
    launches_per_range (instances / range instances: for decode, launches per step).
    """
    import pandas as pd

    df = _read_csv(
        nvtx_kern_sum,
        ["NVTX Range", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Kernel Name"],
        "nvtx_kern_sum",
        ["NVTX Inst", "Kern Inst", "Total Time (ns)"],
        shown,
    )
    _no_copies(df, ["NVTX Range", "Style", "PID", "TID", "Kernel Name"], shown or nvtx_kern_sum, "nvtx_kern_sum")
    df = df[df["NVTX Range"].notna() & (df["NVTX Range"].astype(str) != "")]
    parts = df["NVTX Range"].map(split_range)
    out = pd.DataFrame(
        {
            "domain": [p[0] for p in parts],
            "stage": [p[1] for p in parts],
            "kernel": df["Kernel Name"].astype(str).values,
            "instances": df["Kern Inst"].astype("int64").values,
            "total_ns": df["Total Time (ns)"].astype("float64").values,
            "range_instances": df["NVTX Inst"].astype("int64").values,
        }
    )
    per_launch = out["total_ns"] / out["instances"].where(out["instances"] > 0)
    if (per_launch < MIN_KERNEL_NS).any():
        i = int(per_launch.idxmin())
        raise InputError(
            f"{shown or nvtx_kern_sum}: row {i + 2}: {out.loc[i, 'kernel'][:60]} took {per_launch[i]:.3g} ns per "
            f"launch; no GPU kernel completes in under {MIN_KERNEL_NS} ns (columns swapped, or an edited "
            "export?); export it again"
        )
    out = out.groupby(["domain", "stage", "kernel"], as_index=False).agg(
        instances=("instances", "sum"), total_ns=("total_ns", "sum"), range_instances=("range_instances", "max")
    )
    out["launches_per_range"] = out["instances"] / out["range_instances"]
    return out.sort_values(["stage", "total_ns"], ascending=[True, False], ignore_index=True)


def containers(kernels: pd.DataFrame, stages: pd.DataFrame) -> list[str]:
    """Ranges that only hold other ranges (a ``decode_all`` around the decode steps), from stats tables alone: nsys
    lists a kernel under every range open at its launch, so such a range's kernels (name, launches, time) are exactly
    the sum of those of the shorter ranges whose kernels it includes. As the SQLite path, they are not stages."""
    import numpy as np
    import pandas as pd

    maps = {st: g.groupby("kernel")[["instances", "total_ns"]].sum() for st, g in kernels.groupby("stage")}
    wall = dict(zip(stages["stage"], stages["wall_ns"], strict=True))
    found = []
    for a, mine in maps.items():
        inner = [
            m for b, m in maps.items() if b != a and wall.get(b, 0) < wall.get(a, 0) and set(m.index) <= set(mine.index)
        ]
        if not inner:
            continue
        total = pd.concat(inner).groupby(level=0).sum().reindex(mine.index, fill_value=0)
        if np.allclose(total.to_numpy(dtype=float), mine.to_numpy(dtype=float), rtol=1e-9, atol=0):
            found.append(str(a))
    return found


def stage_table(nvtx_sum: str | Path, shown: str | None = None) -> pd.DataFrame:
    """Wall time per NVTX range: columns domain, stage, range_instances, wall_ns (total over instances); ``shown``:
    the file's name in errors."""
    import pandas as pd

    required = ["Total Time (ns)", "Instances", "Range"]
    df = _read_csv(nvtx_sum, required, "nvtx_sum", ["Total Time (ns)", "Instances"], shown)
    _no_copies(df, ["Range", "Style"], shown or nvtx_sum, "nvtx_sum")
    parts = df["Range"].map(split_range)
    return pd.DataFrame(
        {
            "domain": [p[0] for p in parts],
            "stage": [p[1] for p in parts],
            "range_instances": df["Instances"].astype("int64").values,
            "wall_ns": df["Total Time (ns)"].astype("float64").values,
        }
    )


def gpu_name(sqlite_path: str | Path) -> str | None:
    """The profiled GPU's name from the SQLite export, if recorded."""
    with sqlite3.connect(f"file:{Path(sqlite_path)}?mode=ro", uri=True) as con:
        try:
            row = con.execute("SELECT name FROM TARGET_INFO_GPU LIMIT 1").fetchone()
        except sqlite3.Error:
            return None
    return row[0] if row else None
