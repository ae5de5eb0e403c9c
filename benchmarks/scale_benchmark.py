"""Benchmark (CPU): attribution and planning of very long timelines, on schema-faithful synthetic SQLite exports.

A real export of the default decoder (tests/data/h200_v2/default, 3,833 kernels: warm-up, ranged and probe
passes) is replicated R times into one database: timestamps shifted past the previous copy, correlation ids
offset, step payloads of the stage and probe ranges offset so that every copy's steps are new steps of the
same stages. Each size runs in a fresh process; the table gives seconds and peak memory (max RSS).
For comparison the range join in SQL that nsightflow used before (an NVTX range per launch, found by a
BETWEEN join) runs on the smaller sizes.
Usage: python benchmarks/scale_benchmark.py [launches ...]   (default: 10000 100000 1000000)
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200_v2" / "default" / "timeline.sqlite"
TABLES = ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds", "TARGET_INFO_GPU"]

OLD_SQL = """
WITH domains AS (SELECT domainId, text AS domain FROM NVTX_EVENTS WHERE eventType = 75),
ranges AS (SELECT n.start, n."end", n.globalTid, COALESCE(n.text, s.value) AS name, n.eventType
           FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId LEFT JOIN domains d ON d.domainId = n.domainId
           WHERE n.eventType IN (59, 60) AND n."end" IS NOT NULL AND d.domain = 'nsightflow')
SELECT r.name, k.start, rt.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId
JOIN ranges r ON rt.start >= r.start AND rt."end" <= r."end" AND (r.eventType = 60 OR rt.globalTid = r.globalTid)
"""


def build(dst: Path, launches: int) -> int:
    """Replicate SRC until it holds at least ``launches`` kernels; return the kernel count."""
    con = sqlite3.connect(dst)
    con.execute(f"ATTACH DATABASE '{SRC}' AS s")
    for t in TABLES:
        con.execute(con.execute("SELECT sql FROM s.sqlite_master WHERE name = ?", (t,)).fetchone()[0])
    con.execute("INSERT INTO main.StringIds SELECT * FROM s.StringIds")
    con.execute("INSERT INTO main.TARGET_INFO_GPU SELECT * FROM s.TARGET_INFO_GPU")
    per = con.execute("SELECT COUNT(*) FROM s.CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    t0, t1 = con.execute('SELECT MIN(start), MAX("end") FROM s.NVTX_EVENTS WHERE "end" IS NOT NULL').fetchone()
    lo = min(t0, con.execute("SELECT MIN(start) FROM s.CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0])
    span = max(t1, con.execute('SELECT MAX("end") FROM s.CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]) - lo + 1000
    corr = con.execute("SELECT MAX(correlationId) FROM s.CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    steps = (
        con.execute(
            "SELECT MAX(COALESCE(int64Value, uint64Value, int32Value, uint32Value)) FROM s.NVTX_EVENTS "
            "WHERE domainId IN (SELECT domainId FROM s.NVTX_EVENTS WHERE eventType = 75 AND "
            "text IN ('nsightflow', 'nsightflow.probe'))"
        ).fetchone()[0]
        + 1
    )
    stage_domains = (
        "(SELECT domainId FROM s.NVTX_EVENTS WHERE eventType = 75 AND text IN ('nsightflow', 'nsightflow.probe'))"
    )
    ncols = [r[1] for r in con.execute("PRAGMA s.table_info(NVTX_EVENTS)")]
    kcols = [r[1] for r in con.execute("PRAGMA s.table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    rcols = [r[1] for r in con.execute("PRAGMA s.table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]

    def shifted(cols, k, extra=None):
        out = []
        for c in cols:
            if c in ("start", "end"):
                out.append(f'"{c}" + {k * span}')
            elif c == "correlationId":
                out.append(f"correlationId + {k * corr}")
            elif extra and c in extra:
                out.append(extra[c])
            else:
                out.append(f'"{c}"')
        return ", ".join(out)

    reps = -(-launches // per)
    for k in range(reps):
        payload = {
            c: f"CASE WHEN domainId IN {stage_domains} AND {c} IS NOT NULL THEN {c} + {k * steps} ELSE {c} END"
            for c in ("int64Value", "uint64Value", "int32Value", "uint32Value")
        }
        where = "" if k == 0 else " WHERE eventType != 75"
        con.execute(f"INSERT INTO main.NVTX_EVENTS SELECT {shifted(ncols, k, payload)} FROM s.NVTX_EVENTS{where}")
        con.execute(
            f"INSERT INTO main.CUPTI_ACTIVITY_KIND_KERNEL SELECT {shifted(kcols, k)} FROM s.CUPTI_ACTIVITY_KIND_KERNEL"
        )
        con.execute(
            f"INSERT INTO main.CUPTI_ACTIVITY_KIND_RUNTIME SELECT {shifted(rcols, k)} "
            "FROM s.CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    con.commit()
    n = con.execute("SELECT COUNT(*) FROM main.CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.close()
    return n


MEASURE = """
import json, resource, sys, time
from nsightflow.capture.read.attribution import read_timeline
from nsightflow.capture.read.plan import plan_capture
t = time.time()
tl = read_timeline(sys.argv[1], "nsightflow")
t_attr = time.time() - t
p = plan_capture(tl, "nsightflow", ["first", "last"], "representatives")
ranged = int((tl.launches["pass_"] == "ranged").sum())
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"attribute_s": t_attr, "total_s": time.time() - t, "ranged": ranged,
                  "profiled": len(p.expected), "max_rss_mb": rss_mb}))
"""

OLD = """
import resource, sqlite3, sys, time
t = time.time()
con = sqlite3.connect(sys.argv[1])
n = len(con.execute(sys.argv[2]).fetchall())
print(f"{time.time() - t:.1f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} {n}")
"""

if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 100_000, 1_000_000]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            db = Path(tmp) / f"t{size}.sqlite"
            t = time.time()
            n = build(db, size)
            built = time.time() - t
            got = json.loads(
                subprocess.run(
                    [sys.executable, "-c", MEASURE, str(db)], check=True, capture_output=True, text=True
                ).stdout
            )
            old = "—"
            if n <= 200_000:
                s, mb, _ = subprocess.run(
                    [sys.executable, "-c", OLD, str(db), OLD_SQL], check=True, capture_output=True, text=True
                ).stdout.split()
                old = f"{s} s, {mb} MB"
            rows.append((n, got, old, built))
            print(f"{n} kernels (built in {built:.0f} s): {got}; old range join: {old}", flush=True)
            db.unlink()
    print(
        f"\n{'kernels':>9} {'in ranges':>10} {'attribute s':>12} {'+ plan s':>9} {'max RSS MB':>11} "
        f"{'profiled':>9}  old SQL join"
    )
    for n, g, old, _ in rows:
        print(
            f"{n:9d} {g['ranged']:10d} {g['attribute_s']:12.1f} {g['total_s']:9.1f} {g['max_rss_mb']:11.0f} "
            f"{g['profiled']:9d}  {old}"
        )
