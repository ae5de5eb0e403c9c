"""Nsight Systems: command lines, and the timeline's tables as DataFrames.

Three readers feed the rest of the pipeline:
- ``kernel_table``: GPU time and instances per (NVTX stage, kernel), from ``nvtx_kern_sum``;
- ``stage_table``: wall time and instances per NVTX range, from ``nvtx_sum``;
- ``launch_sequence``: every kernel launched inside a range, in launch order, with the
  range's step payload, grid and block, from the SQLite export. Sampling offsets for ncu
  and the join between ncu results and timeline kernels are computed from it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

STATS_REPORTS = ("cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum")
LAUNCH_COLUMNS = ["domain", "stage", "step", "range_index", "kernel", "mangled", "grid", "block", "start", "end",
                  "duration_ns", "seq"]


def profile_argv(nsys: str, out_base: str | Path, program: list[str], trace: str = "cuda,nvtx") -> list[str]:
    """``nsys profile`` of ``program``; writes ``out_base.nsys-rep``. No OS-runtime tracing (it grows past GBs)."""
    return [nsys, "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none",
            "--force-overwrite=true", "-o", str(out_base), *program]


def stats_argv(nsys: str, rep: str | Path, out_prefix: str | Path) -> list[str]:
    """``nsys stats`` writing ``PREFIX_<report>.csv`` per report and ``<rep>.sqlite`` beside the report."""
    argv = [nsys, "stats"]
    for report in STATS_REPORTS:
        argv += ["--report", report]
    return argv + ["--format", "csv", "--force-export=true", "--force-overwrite=true", "-o", str(out_prefix), str(rep)]


def split_range(label: str) -> tuple[str, str]:
    """``'domain:name'`` as nsys stats prints a range → (domain, name); ``''`` domain for the default one."""
    label = "" if pd.isna(label) else str(label)
    if ":" in label:
        domain, name = label.split(":", 1)
        return domain, name
    return "", label


def _read_csv(path: str | Path, required: list[str], what: str) -> pd.DataFrame:
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError as exc:
        raise ValueError(f"{path}: empty file; expected the {what} CSV from nsys stats") from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: not an nsys stats {what} CSV: missing columns {missing} (found {list(df.columns)}). "
            f"Export it with: nsys stats --report {what} --format csv -o PREFIX REPORT.nsys-rep"
        )
    return df


def kernel_table(nvtx_kern_sum: str | Path) -> pd.DataFrame:
    """GPU time per (stage, kernel) for kernels launched inside NVTX ranges.

    Columns: domain, stage, kernel, instances, total_ns, range_instances,
    launches_per_range (instances / range instances: for decode, launches per step).
    """
    df = _read_csv(nvtx_kern_sum, ["NVTX Range", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Kernel Name"],
                   "nvtx_kern_sum")
    df = df[df["NVTX Range"].notna() & (df["NVTX Range"].astype(str) != "")]
    parts = df["NVTX Range"].map(split_range)
    out = pd.DataFrame({
        "domain": [p[0] for p in parts],
        "stage": [p[1] for p in parts],
        "kernel": df["Kernel Name"].astype(str).values,
        "instances": df["Kern Inst"].astype("int64").values,
        "total_ns": df["Total Time (ns)"].astype("float64").values,
        "range_instances": df["NVTX Inst"].astype("int64").values,
    })
    out = out.groupby(["domain", "stage", "kernel"], as_index=False).agg(
        instances=("instances", "sum"), total_ns=("total_ns", "sum"), range_instances=("range_instances", "max"))
    out["launches_per_range"] = out["instances"] / out["range_instances"]
    return out.sort_values(["stage", "total_ns"], ascending=[True, False], ignore_index=True)


def stage_table(nvtx_sum: str | Path) -> pd.DataFrame:
    """Wall time per NVTX range: columns domain, stage, range_instances, wall_ns (total over instances)."""
    df = _read_csv(nvtx_sum, ["Total Time (ns)", "Instances", "Range"], "nvtx_sum")
    parts = df["Range"].map(split_range)
    return pd.DataFrame({
        "domain": [p[0] for p in parts],
        "stage": [p[1] for p in parts],
        "range_instances": df["Instances"].astype("int64").values,
        "wall_ns": df["Total Time (ns)"].astype("float64").values,
    })


_LAUNCHES_SQL = """
WITH domains AS (
    SELECT domainId, text AS domain FROM NVTX_EVENTS WHERE eventType = 75
),
ranges AS (
    SELECT n.start, n."end", n.globalTid,
           COALESCE(n.text, s.value) AS name,
           COALESCE(d.domain, '') AS domain,
           COALESCE(n.int64Value, n.uint64Value, n.int32Value, n.uint32Value) AS payload,
           n.eventType
    FROM NVTX_EVENTS n
    LEFT JOIN StringIds s ON s.id = n.textId
    LEFT JOIN domains d ON d.domainId = n.domainId
    WHERE n.eventType IN (59, 60) AND n."end" IS NOT NULL
)
SELECT r.domain, r.name AS stage, r.payload, r.start AS range_start, r."end" AS range_end,
       k.start, k."end", k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
       dn.value AS kernel, COALESCE(mn.value, dn.value) AS mangled, rt.start AS launch_start
FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId
JOIN StringIds dn ON dn.id = k.demangledName
LEFT JOIN StringIds mn ON mn.id = k.mangledName
JOIN ranges r ON rt.start >= r.start AND rt."end" <= r."end"
     AND (r.eventType = 60 OR rt.globalTid = r.globalTid)
ORDER BY rt.start
"""


def launch_sequence(sqlite_path: str | Path) -> pd.DataFrame:
    """Every kernel launched inside an NVTX range, in launch order.

    A kernel belongs to the innermost range whose CPU interval contains its launch call on
    the same thread (what nsys' own projection does for push/pop ranges). Columns: domain,
    stage, step (the range's payload, else its instance index), range_index, kernel (demangled,
    as nsys stats prints it), mangled (the linker name ncu's kernel filter matches exactly),
    grid, block, start, end, duration_ns, seq (launch index within the range).
    """
    path = Path(sqlite_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no SQLite export; make it with: nsys export --type sqlite -o {path} REPORT.nsys-rep")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        df = pd.read_sql_query(_LAUNCHES_SQL, con)
    if df.empty:
        return pd.DataFrame(columns=LAUNCH_COLUMNS)
    # Innermost range: for a launch inside nested ranges keep the one that started last.
    df = df.sort_values(["launch_start", "range_start"]).drop_duplicates(["launch_start", "kernel"], keep="last")
    df["range_index"] = df.groupby(["domain", "stage"])["range_start"].rank(method="dense").astype(int) - 1
    df["step"] = df["payload"].where(df["payload"].notna(), df["range_index"]).astype(int)
    df["grid"] = [f"({x}, {y}, {z})" for x, y, z in zip(df.gridX, df.gridY, df.gridZ)]
    df["block"] = [f"({x}, {y}, {z})" for x, y, z in zip(df.blockX, df.blockY, df.blockZ)]
    df["duration_ns"] = df["end"] - df["start"]
    df = df.sort_values("launch_start", ignore_index=True)
    df["seq"] = df.groupby(["domain", "stage", "range_index"]).cumcount()
    return df[LAUNCH_COLUMNS]


def gpu_name(sqlite_path: str | Path) -> str | None:
    """The profiled GPU's name from the SQLite export, if recorded."""
    with sqlite3.connect(f"file:{Path(sqlite_path)}?mode=ro", uri=True) as con:
        try:
            row = con.execute("SELECT name FROM TARGET_INFO_GPU LIMIT 1").fetchone()
        except sqlite3.Error:
            return None
    return row[0] if row else None
