"""Trim real GPU-host captures for tests/data: keep headers, units and rows; drop what tests never read.

Usage: python scripts/trim_fixtures.py RESULTS_DIR/tinyllm OUT_DIR [EXPLORE_DIR]
- ncu raw CSVs: drop device__attribute_* (but display_name), launch__*, nvlink__*, numa__*, profiler__* columns;
- the nsys SQLite: keep only the tables nsightflow reads (NVTX, kernels, runtime calls, strings, GPU info).
"""
import csv
import shutil
import sqlite3
import sys
from pathlib import Path

DROP = ("device__attribute_", "launch__", "nvlink__", "numa__", "profiler__", "c2clink__")
KEEP = {"device__attribute_display_name", "launch__grid_size", "launch__block_size"}
TABLES = ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds", "TARGET_INFO_GPU"]


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
    for t in TABLES:
        sql = con.execute("SELECT sql FROM s.sqlite_master WHERE name = ?", (t,)).fetchone()[0]
        con.execute(sql)
        con.execute(f"INSERT INTO main.{t} SELECT * FROM s.{t}")
    con.commit()
    con.execute("DETACH DATABASE s")
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    # h200_tinyllm was made with EXPLORE_DIR (scripts/gpu_explore.sh) and captures prefill, decode.step3;
    # h200_tinyllm_filtered with no EXPLORE_DIR and every capture of the run.
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    explore = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "stats").mkdir(exist_ok=True)
    (out / "plans").mkdir(exist_ok=True)
    for f in (run / "timeline" / "stats").glob("*.csv"):
        shutil.copy(f, out / "stats" / f.name)
    caps = ("prefill", "decode.step3") if explore else sorted(
        p.name.removesuffix(".raw.csv") for p in (run / "ncu").glob("*.raw.csv"))
    for cap in caps:
        trim_csv(run / "ncu" / f"{cap}.raw.csv", out / f"{cap}.raw.csv")
        shutil.copy(run / "plans" / f"{cap}.json", out / "plans" / f"{cap}.json")
    for f in ("analytic_flops.json", "selected_kernels.csv"):
        shutil.copy(run / f, out / f)
    sqlite = run / "timeline" / "timeline.sqlite"
    trim_sqlite(sqlite if sqlite.exists() else explore / "timeline.sqlite", out / "timeline.sqlite")
    if explore:
        trim_csv(explore / "at.raw.csv", out / "at_range.raw.csv")
        shutil.copy(explore / "range_decode.log", out / "ncu_range_replay_decode.log")
    else:
        shutil.copy(run / "timeline" / "manifest.json", out / "manifest.json")
