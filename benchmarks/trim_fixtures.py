"""Trim one run's real GPU-host results for tests/data: keep what the tests read, drop what they never do.

Usage: python benchmarks/trim_fixtures.py RUN_DIR OUT_DIR [EXTRA_RAW_CSV ...]
  RUN_DIR: results/<run> of a workflow run on the GPU host (kept by the GPU tier's NSIGHTFLOW_KEEP_RESULTS)
- the nsys SQLite export: only the tables nsightflow reads (NVTX, kernels, strings, GPU info) and, of the
  runtime calls, those that launched a kernel;
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


def trim_sqlite(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    con = sqlite3.connect(dst)
    con.execute(f"ATTACH DATABASE '{src}' AS s")
    for t in TABLES + ["CUPTI_ACTIVITY_KIND_RUNTIME"]:
        con.execute(con.execute("SELECT sql FROM s.sqlite_master WHERE name = ?", (t,)).fetchone()[0])
    for t in TABLES:
        con.execute(f"INSERT INTO main.{t} SELECT * FROM s.{t}")
    con.execute(
        "INSERT INTO main.CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM s.CUPTI_ACTIVITY_KIND_RUNTIME "
        "WHERE correlationId IN (SELECT correlationId FROM s.CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    con.commit()
    con.execute("DETACH DATABASE s")
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
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
