"""The nsys SQLite export, read column-wise: NVTX ranges with their domains, texts and payloads, kernels with the
call that launched them (graph kernels: the graph launch's), the string table, the GPU's name."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from nsightflow.errors import TimelineError

PUSH_POP, START_END, DOMAIN_CREATE = 59, 60, 75


def columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def strings(con: sqlite3.Connection, ids: np.ndarray) -> dict[int, str]:
    unique = [int(i) for i in np.unique(ids[~pd.isna(ids)])]
    out: dict[int, str] = {}
    for i in range(0, len(unique), 900):
        chunk = unique[i : i + 900]
        q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(chunk))})"
        out.update(dict(con.execute(q, chunk)))
    return out


def nvtx_events(con: sqlite3.Connection) -> pd.DataFrame:
    """Every closed push/pop or start/end range with its domain name, text and payload."""
    cols = columns(con, "NVTX_EVENTS")
    payload = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    pay = f"COALESCE({', '.join(payload)})" if payload else "NULL"
    df = pd.read_sql_query(
        f'SELECT start, "end", eventType, globalTid, domainId, text, textId, {pay} AS payload FROM NVTX_EVENTS '
        f"WHERE eventType IN ({PUSH_POP}, {START_END}, {DOMAIN_CREATE})",
        con,
    )
    # Domain ids are numbered per process: several processes (ranks) give one id different names.
    df["pid"] = pid_of(df["globalTid"].fillna(0))
    made = df.loc[df["eventType"] == DOMAIN_CREATE, ["pid", "domainId", "text"]].rename(columns={"text": "domain"})
    df = df[(df["eventType"] != DOMAIN_CREATE) & df["end"].notna()]
    df = df.merge(made.drop_duplicates(["pid", "domainId"]), on=["pid", "domainId"], how="left")
    texts = strings(con, df["textId"].to_numpy(dtype=float))
    df["name"] = df["text"].where(df["text"].notna(), df["textId"].map(texts))
    df["domain"] = df["domain"].fillna("")
    df["end"] = df["end"].astype("int64")
    return df.sort_values("start", kind="stable").reset_index(drop=True)


def kernels(con: sqlite3.Connection) -> pd.DataFrame:
    """Every kernel with the time of the call that launched it (graph kernels: the graph launch's)."""
    cols = columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    names = ("mangledName", "graphNodeId", "dynamicSharedMemory", "globalPid", "streamId")
    opt = {c: c if c in cols else "NULL" for c in names}
    k = pd.read_sql_query(
        'SELECT start, "end", correlationId, demangledName, gridX, gridY, gridZ, blockX, blockY, blockZ, '
        f"{opt['mangledName']} AS mangledName, {opt['graphNodeId']} AS graphNodeId, "
        f"{opt['dynamicSharedMemory']} AS smem, {opt['globalPid']} AS globalPid, {opt['streamId']} AS stream "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL",
        con,
    )
    rt = pd.read_sql_query(
        "SELECT correlationId, start AS launch_ns, globalTid AS tid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)",
        con,
    )
    # correlation ids are unique within a process: match the process too
    k["pid"] = pid_of(k["globalPid"].fillna(0))
    rt["pid"] = pid_of(rt["tid"])
    rt = rt.drop_duplicates(["correlationId", "pid"])
    k = k.merge(rt, on=["correlationId", "pid"], how="left")
    k["launch_ns"] = k["launch_ns"].fillna(k["start"]).astype("int64")
    k["tid"] = k["tid"].fillna(-1).astype("int64")
    return k


def pid_of(global_tid: pd.Series) -> pd.Series:
    """The process id in nsys' global thread or process ids (bits 24-47)."""
    ids = global_tid.to_numpy(dtype="int64")
    return pd.Series((ids >> 24) & 0xFFFFFF, index=global_tid.index)


def own_process(kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the process whose thread opened the stage ranges, where one did (a job of several processes:
    another rank's kernels in the same time window are not this rank's stage); all of them otherwise."""
    pids = set(pid_of(ranges["globalTid"])) if len(ranges) else set()
    return kernels[kernels["pid"] == pids.pop()] if len(pids) == 1 else kernels


def load(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str], str | None]:
    """(NVTX ranges, kernels, the kernels' names by string id, the GPU's name) of an export, or an error naming the
    file and the command that makes a readable one."""
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no SQLite export; make it with: nsys export --type sqlite -o {path} REPORT.nsys-rep"
        )
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise TimelineError(
            f"{path}: not a readable SQLite database ({exc}); export it again with nsys export --type sqlite"
        ) from exc
    missing = {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds"} - tables
    if missing:
        raise TimelineError(
            f"{path}: the export has no {sorted(missing)} table(s): it holds no NVTX ranges or no CUDA "
            "kernels. Profile with nsys profile --trace=cuda,nvtx."
        )
    with con:
        nvtx = nvtx_events(con)
        k = kernels(con)
        names = strings(
            con, np.concatenate([k["demangledName"].to_numpy(dtype=float), k["mangledName"].to_numpy(dtype=float)])
        )
        gpu = None
        if "TARGET_INFO_GPU" in tables:
            row = con.execute("SELECT name FROM TARGET_INFO_GPU LIMIT 1").fetchone()
            gpu = row[0] if row else None
    con.close()

    return nvtx, k, names, gpu
