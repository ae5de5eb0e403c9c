"""Trim one run's real GPU-host results for tests/data: keep what the tests read, drop what they never do.

Usage: python benchmarks/trim_fixtures.py RUN_DIR OUT_DIR [EXTRA_RAW_CSV ...]
       python benchmarks/trim_fixtures.py --steps DOMAIN:I,J,... SQLITE OUT_SQLITE
  RUN_DIR: results/<run> of a workflow run on the GPU host (kept by the GPU tier's NSIGHTFLOW_KEEP_RESULTS)
- the nsys SQLite export: only the tables nsightflow reads (NVTX, kernels, strings, GPU info) and, of the
  runtime calls, those that launched a kernel; with ``--steps``, only what lies in the I-th, J-th, ... top-level
  ranges of DOMAIN (by start), every domain's marks in them included (a long serving loop's timeline: a few of its
  iterations);
- ncu raw CSVs: device__attribute_* (but the name), nvlink__*, numa__*, profiler__*, c2clink__* and launch__*
  columns dropped, except the launch sizes the tests compare;
- plan.json, analytic_flops.json, ceilings.json, manifest.json, stages.csv, kernels.csv and the captures'
  records (ncu/*.cmd.json: what each capture collected) copied as they are.
"""

import csv
import shutil
import sqlite3
import sys
from pathlib import Path

DROP = ("device__attribute_", "launch__", "nvlink__", "numa__", "profiler__", "c2clink__")
KEEP = {
    "device__attribute_display_name",
    "launch__grid_size",
    "launch__block_size",
    "launch__shared_mem_per_block_dynamic",
}
TABLES = ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "TARGET_INFO_GPU"]
COPY = [
    "plan.json",
    "ranges.plan.json",
    "analytic_flops.json",
    "ceilings.json",
    "manifest.json",
    "stages.csv",
    "kernels.csv",
]


def trim_csv(src: Path, dst: Path) -> None:
    rows = list(csv.reader(src.open()))
    keep = [i for i, h in enumerate(rows[0]) if h in KEEP or not h.startswith(DROP)]
    with dst.open("w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for r in rows:
            w.writerow([r[i] for i in keep])


def trim_sqlite(src: Path, dst: Path, steps: tuple[str, list[int]] | None = None) -> None:
    dst.unlink(missing_ok=True)
    con = sqlite3.connect(dst)
    con.execute(f"ATTACH DATABASE '{src}' AS s")
    for t in TABLES + ["CUPTI_ACTIVITY_KIND_RUNTIME"]:
        con.execute(con.execute("SELECT sql FROM s.sqlite_master WHERE name = ?", (t,)).fetchone()[0])
    spans = "1"
    if steps is not None:
        domain, picked = steps
        ranges = con.execute(
            "SELECT e.start, e.end FROM s.NVTX_EVENTS e JOIN s.NVTX_EVENTS d ON d.eventType = 75 "
            "AND d.domainId = e.domainId AND d.text = ? WHERE e.eventType = 59 ORDER BY e.start",
            (domain,),
        ).fetchall()
        top = [r for r in ranges if not any(o[0] < r[0] and r[1] < o[1] for o in ranges)]
        con.execute("CREATE TEMP TABLE spans (lo INTEGER, hi INTEGER)")
        con.executemany("INSERT INTO spans VALUES (?, ?)", [top[i] for i in picked])
        spans = "EXISTS (SELECT 1 FROM spans WHERE start BETWEEN lo AND hi)"
    con.execute(
        "INSERT INTO main.CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM s.CUPTI_ACTIVITY_KIND_RUNTIME "
        f"WHERE correlationId IN (SELECT correlationId FROM s.CUPTI_ACTIVITY_KIND_KERNEL) AND {spans}"
    )
    for t in TABLES:
        where = "1"
        if steps is not None and t == "NVTX_EVENTS":
            where = f"eventType = 75 OR {spans}"
        elif steps is not None and t == "CUPTI_ACTIVITY_KIND_KERNEL":
            where = "correlationId IN (SELECT correlationId FROM main.CUPTI_ACTIVITY_KIND_RUNTIME)"
        con.execute(f"INSERT INTO main.{t} SELECT * FROM s.{t} WHERE {where}")
    con.commit()
    con.execute("DETACH DATABASE s")
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    if sys.argv[1] == "--steps":
        domain, picked = sys.argv[2].rsplit(":", 1)
        trim_sqlite(Path(sys.argv[3]), Path(sys.argv[4]), (domain, [int(i) for i in picked.split(",")]))
        sys.exit()
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    trim_sqlite(run / "timeline" / "timeline.sqlite", out / "timeline.sqlite")
    for name in COPY:
        if (run / name).exists():
            shutil.copy(run / name, out / name)
    for record in sorted((run / "ncu").glob("*.cmd.json")):
        shutil.copy(record, out / record.name)
    for export in sorted((run / "ncu").glob("*.raw.csv")) + [Path(p) for p in sys.argv[3:]]:
        trim_csv(export, out / export.name)
