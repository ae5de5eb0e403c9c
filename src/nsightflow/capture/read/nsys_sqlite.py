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


def _pid(column: str) -> str:
    """SQL for the process id in one of nsys' global thread or process id columns (bits 24-47)."""
    return f"(({column} >> 24) & 16777215)"


def _in_process(column: str, pid: int | None) -> str:
    return "" if pid is None else f" AND {_pid(column)} = {int(pid)}"


def process_of(con: sqlite3.Connection, domain: str) -> int | None:
    """The one process that created NVTX domain ``domain`` (a job's profiled rank), or None (none, or several)."""
    rows = con.execute(
        f"SELECT DISTINCT {_pid('globalTid')} FROM NVTX_EVENTS WHERE eventType = {DOMAIN_CREATE} AND text = ?",
        (domain,),
    ).fetchall()
    return int(rows[0][0]) if len(rows) == 1 else None


def nvtx_events(con: sqlite3.Connection, pid: int | None = None, domain: str | None = None) -> pd.DataFrame:
    """Every closed push/pop or start/end range with its domain name, text and payload (of process ``pid``, and of
    ``domain``, where given: a timeline of many ranks is read in parts)."""
    cols = columns(con, "NVTX_EVENTS")
    payload = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    pay = f"COALESCE({', '.join(payload)})" if payload else "NULL"
    of_domain = (
        ""
        if domain is None
        else f" AND (eventType = {DOMAIN_CREATE} OR ({_pid('globalTid')}, domainId) IN (SELECT {_pid('globalTid')}, "
        f"domainId FROM NVTX_EVENTS WHERE eventType = {DOMAIN_CREATE} AND text = ?))"
    )
    df = pd.read_sql_query(
        f'SELECT start, "end", eventType, globalTid, domainId, text, textId, {pay} AS payload FROM NVTX_EVENTS '
        f"WHERE eventType IN ({PUSH_POP}, {START_END}, {DOMAIN_CREATE}){_in_process('globalTid', pid)}{of_domain}",
        con,
        params=() if domain is None else (domain,),
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


KERNEL_COLUMNS = ["start", "end", "correlationId", "demangledName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                  "blockZ", "mangledName", "graphNodeId", "smem", "globalPid", "stream"]  # fmt: skip


def kernels(con: sqlite3.Connection, pid: int | None = None) -> pd.DataFrame:
    """Every kernel (of process ``pid``, where given) with the time and thread of the call that launched it (graph
    kernels: the graph launch's; its own start and thread -1 where the call is not in the export). Read as integer
    arrays: a timeline of millions of launches keeps no Python object per cell."""
    cols = columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")

    def opt(c: str, missing: int) -> str:  # a column older exports lack, or a NULL cell: ``missing``
        return f"COALESCE({c}, {missing})" if c in cols else str(missing)

    mine = "" if pid is None or "globalPid" not in cols else f" WHERE 1{_in_process('globalPid', pid)}"
    k = _ints(
        con,
        'SELECT start, "end", correlationId, demangledName, gridX, gridY, gridZ, blockX, blockY, blockZ, '
        f"{opt('mangledName', -1)}, {opt('graphNodeId', -1)}, {opt('dynamicSharedMemory', 0)}, "
        f"{opt('globalPid', 0)}, {opt('streamId', -1)} FROM CUPTI_ACTIVITY_KIND_KERNEL{mine}",
        len(KERNEL_COLUMNS),
    )
    out = pd.DataFrame(k, columns=KERNEL_COLUMNS)
    for c in ("mangledName", "graphNodeId", "stream"):  # absent: NaN, as the readers expect
        out[c] = out[c].where(out[c] >= 0)
    out["pid"] = (k[:, 13] >> 24) & 0xFFFFFF
    out["launch_ns"], out["tid"] = _calls(con, out["pid"].to_numpy(), k[:, 2], k[:, 0], pid)
    return out


def _ints(con: sqlite3.Connection, query: str, width: int) -> np.ndarray:
    """The rows of an all-integer query as one int64 array (millions of rows: no per-cell Python objects kept)."""
    rows = con.execute(query).fetchall()
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


def _calls(
    con: sqlite3.Connection, pids: np.ndarray, correlation: np.ndarray, starts: np.ndarray, pid: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(launch time, launching thread) of each kernel: the runtime call with its correlation id in its process
    (correlation ids repeat across processes); the kernel's own start and -1 where the export has no such call."""
    rt = _ints(
        con,
        "SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        f"WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL){_in_process('globalTid', pid)}",
        3,
    )
    if not len(rt):
        return starts.copy(), np.full(len(starts), -1, dtype=np.int64)
    key, call_key = (pids << 40) | correlation, (((rt[:, 2] >> 24) & 0xFFFFFF) << 40) | rt[:, 0]
    order = np.argsort(call_key, kind="stable")
    sorted_keys, calls = call_key[order], rt[order]
    at = np.clip(np.searchsorted(sorted_keys, key), 0, len(order) - 1)
    found = sorted_keys[at] == key
    return np.where(found, calls[at, 1], starts), np.where(found, calls[at, 2], -1)


def kernel_times(con: sqlite3.Connection) -> pd.DataFrame:
    """Every kernel's process, start, end, name id and launch time (see :func:`kernels`): the lean read of a
    many-rank timeline's millions of kernels."""
    has_pid = "globalPid" in columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    k = _ints(
        con,
        'SELECT start, "end", correlationId, demangledName, '
        f"{'COALESCE(globalPid, 0)' if has_pid else '0'} FROM CUPTI_ACTIVITY_KIND_KERNEL",
        5,
    )
    pid = (k[:, 4] >> 24) & 0xFFFFFF
    launch, _ = _calls(con, pid, k[:, 2], k[:, 0])
    return pd.DataFrame({"pid": pid, "start": k[:, 0], "end": k[:, 1], "demangledName": k[:, 3], "launch_ns": launch})


def pid_of(global_tid: pd.Series) -> pd.Series:
    """The process id in nsys' global thread or process ids (bits 24-47)."""
    ids = global_tid.to_numpy(dtype="int64")
    return pd.Series((ids >> 24) & 0xFFFFFF, index=global_tid.index)


def own_process(kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the process whose thread opened the stage ranges, where one did (a job of several processes:
    another rank's kernels in the same time window are not this rank's stage); all of them otherwise."""
    pids = set(pid_of(ranges["globalTid"])) if len(ranges) else set()
    return kernels[kernels["pid"] == pids.pop()] if len(pids) == 1 else kernels


def connect(path: Path) -> tuple[sqlite3.Connection, set[str]]:
    """A read-only connection to an nsys SQLite export and its tables, or an error naming the file and the command
    that makes a readable one."""
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
        con.close()
        raise TimelineError(
            f"{path}: the export has no {sorted(missing)} table(s): it holds no NVTX ranges or no CUDA "
            "kernels. Profile with nsys profile --trace=cuda,nvtx."
        )
    return con, tables


def load(path: Path, domain: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str], str | None]:
    """(NVTX ranges, kernels, the kernels' names by string id, the GPU's name) of an export (see :func:`connect`).
    With ``domain``, created by one process only (the profiled rank of a job of several), that process's alone."""
    con, tables = connect(path)
    with con:
        pid = process_of(con, domain) if domain else None
        nvtx = nvtx_events(con, pid)
        k = kernels(con, pid)
        names = strings(
            con, np.concatenate([k["demangledName"].to_numpy(dtype=float), k["mangledName"].to_numpy(dtype=float)])
        )
        gpu = None
        if "TARGET_INFO_GPU" in tables:
            row = con.execute("SELECT name FROM TARGET_INFO_GPU LIMIT 1").fetchone()
            gpu = row[0] if row else None
    con.close()
    return nvtx, k, names, gpu
