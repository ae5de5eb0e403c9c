"""Benchmark (CPU): attribution and planning of a multi-process timeline of millions of launches over 8 ranks.

A real two-rank export (tests/data/h200x2_tp_ranks: tensor-parallel decode over NCCL on two H200s, 146 kernels, the
profiled rank's stage, probe and operator ranges and both ranks' ranks-domain ranges) is replicated: in processes
(pid + 1000·r for copy r: 2 ranks become 8, each with its own NVTX domain ids, as nsys numbers them per process)
and in time (timestamps shifted past the previous copy, correlation ids offset, the step payloads of the stage,
probe and ranks domains offset so every copy's steps are new steps). What is timed, in a fresh process per size,
is what the workflow's plan and aggregate jobs do with a timeline: the profiled rank's attribution and capture plan
(nsightflow.capture.read.attribution, nsightflow.capture.read.plan) and every rank's table (nsightflow.analysis.ranks).
Usage: python benchmarks/ranks_scale_benchmark.py [launches ...]   (default: 100000 1000000 5000000)
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200x2_tp_ranks" / "timeline.sqlite"
TABLES = ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds", "TARGET_INFO_GPU"]
PID_COPIES = 4  # 2 ranks x 4 = 8 ranks
PID_STEP = 1000
STEP_DOMAINS = ("nsightflow", "nsightflow.probe", "nsightflow.ranks")


def build(dst: Path, launches: int) -> tuple[int, list[int]]:
    """Replicate SRC until it holds at least ``launches`` kernels over 8 processes; (kernels, the pids)."""
    con = sqlite3.connect(dst)
    con.execute(f"ATTACH DATABASE '{SRC}' AS s")
    for t in TABLES:
        con.execute(con.execute("SELECT sql FROM s.sqlite_master WHERE name = ?", (t,)).fetchone()[0])
    con.execute("INSERT INTO main.StringIds SELECT * FROM s.StringIds")
    con.execute("INSERT INTO main.TARGET_INFO_GPU SELECT * FROM s.TARGET_INFO_GPU")
    per = con.execute("SELECT COUNT(*) FROM s.CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] * PID_COPIES
    lo = con.execute("SELECT MIN(start) FROM s.CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    hi = max(
        con.execute('SELECT MAX("end") FROM s.NVTX_EVENTS').fetchone()[0],
        con.execute('SELECT MAX("end") FROM s.CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0],
    )
    span = hi - min(lo, con.execute("SELECT MIN(start) FROM s.NVTX_EVENTS").fetchone()[0]) + 1000
    corr = con.execute("SELECT MAX(correlationId) FROM s.CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    pairs = con.execute(
        "SELECT (globalTid >> 24) & 16777215, domainId FROM s.NVTX_EVENTS WHERE eventType = 75 AND text IN "
        f"({','.join('?' * len(STEP_DOMAINS))})",
        STEP_DOMAINS,
    ).fetchall()
    stepped = f"((globalTid >> 24) & 16777215, domainId) IN (VALUES {', '.join(f'({p}, {d})' for p, d in pairs)})"
    # One profiled rank: in the other copies its own stage and probe ranges are left out and its operator marks go to
    # the ranks' operator domain, as in every rank but the profiled one.
    own = con.execute(
        "SELECT (globalTid >> 24) & 16777215, domainId FROM s.NVTX_EVENTS WHERE eventType = 75 AND text IN "
        "('nsightflow', 'nsightflow.probe')"
    ).fetchall()
    profiled_only = f"((globalTid >> 24) & 16777215, domainId) IN (VALUES {', '.join(f'({p}, {d})' for p, d in own)})"
    steps = con.execute(f"SELECT MAX(COALESCE(int64Value, uint64Value)) FROM s.NVTX_EVENTS WHERE {stepped}").fetchone()
    steps = (steps[0] or 0) + 1
    reps = -(-launches // per)
    copies = (
        f"WITH RECURSIVE c(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM c WHERE k < {reps - 1}), "
        f"p(r) AS (SELECT 0 UNION ALL SELECT r + 1 FROM p WHERE r < {PID_COPIES - 1}) "
    )

    def shifted(table: str, domain_rows: bool = False) -> str:
        out = []
        for c in [r[1] for r in con.execute(f"PRAGMA s.table_info({table})")]:
            if c in ("start", "end"):
                out.append(f'"{c}"' if domain_rows else f'"{c}" + c.k * {span}')
            elif c == "correlationId":
                out.append(f"correlationId + c.k * {corr}")
            elif c in ("globalTid", "endGlobalTid", "globalPid"):
                out.append(f"{c} + p.r * {PID_STEP << 24}")
            elif c == "text" and domain_rows:
                out.append("CASE WHEN p.r > 0 AND text = 'nsightflow.ops' THEN 'nsightflow.ranks.ops' ELSE text END")
            elif c in ("int64Value", "uint64Value") and not domain_rows:
                out.append(f"CASE WHEN {c} IS NOT NULL AND {stepped} THEN {c} + c.k * {steps} ELSE {c} END")
            else:
                out.append(f'"{c}"')
        return ", ".join(out)

    con.execute(
        f"INSERT INTO main.NVTX_EVENTS {copies} SELECT {shifted('NVTX_EVENTS', True)} FROM s.NVTX_EVENTS, "
        f"(SELECT 0 AS k) AS c, p WHERE eventType = 75 AND NOT (p.r > 0 AND {profiled_only})"
    )
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        where = f" WHERE eventType != 75 AND NOT (p.r > 0 AND {profiled_only})" if t == "NVTX_EVENTS" else ""
        con.execute(f"INSERT INTO main.{t} {copies} SELECT {shifted(t)} FROM s.{t}, c, p{where}")
    con.commit()
    n = con.execute("SELECT COUNT(*) FROM main.CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    pids = [
        r[0] for r in con.execute("SELECT DISTINCT (globalPid >> 24) & 16777215 FROM main.CUPTI_ACTIVITY_KIND_KERNEL")
    ]
    con.close()
    return n, sorted(pids)


MEASURE = """
import json, resource, sys, time
from nsightflow.analysis import ranks
from nsightflow.capture.read.attribution import read_timeline
from nsightflow.capture.read.plan import plan_capture
from nsightflow.records import Manifest
pids = json.loads(sys.argv[2])
manifest = Manifest(stages=[{"name": "prefill"}, {"name": "decode"}], profiled_rank=0,
                    ranks=[{"rank": i, "pid": p, "device": f"cuda:{i}"} for i, p in enumerate(pids)])
t = time.time()
tl = read_timeline(sys.argv[1], "nsightflow")
p = plan_capture(tl, "nsightflow", ["first", "last"], "representatives")
t_plan = time.time() - t
table = ranks.rank_table(ranks.rank_launches(sys.argv[1], "nsightflow"), manifest)
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"plan_s": t_plan, "total_s": time.time() - t, "ranged": int((tl.launches["pass_"] == "ranged").sum()),
                  "profiled": len(p.expected), "rank_launches": int(table["launches"].sum()), "ranks": len(pids),
                  "max_rss_mb": rss_mb}))
"""

if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [100_000, 1_000_000, 5_000_000]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            db = Path(tmp) / f"t{size}.sqlite"
            t = time.time()
            n, pids = build(db, size)
            built = time.time() - t
            out = subprocess.run(
                [sys.executable, "-c", MEASURE, str(db), json.dumps(pids)], check=True, capture_output=True, text=True
            ).stdout
            got = json.loads(out)
            rows.append((n, got))
            print(f"{n} kernels over {len(pids)} processes (built in {built:.0f} s): {got}", flush=True)
            db.unlink()
    print(
        f"\n{'kernels':>9} {'ranks':>5} {'rank 0 staged':>13} {'attribute+plan s':>17} {'+ ranks table s':>16} "
        f"{'max RSS MB':>11} {'all ranks staged':>17} {'profiled':>9}"
    )
    for n, g in rows:
        print(
            f"{n:9d} {g['ranks']:5d} {g['ranged']:13d} {g['plan_s']:17.1f} {g['total_s']:16.1f} "
            f"{g['max_rss_mb']:11.0f} {g['rank_launches']:17d} {g['profiled']:9d}"
        )
