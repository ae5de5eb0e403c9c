"""What each traced pass of the timeline's launch costs, nsys's work after the program included: the 8B-shaped
decoder under ``nsys profile`` with the timeline job's flags, three ways (the same warm-up and timed pass first):

  both    the ranged pass and the counting, marking probe pass traced (what the timeline job runs)
  probe   the probe pass alone traced
  ranged  the ranged pass alone traced

Each row: the traced passes' seconds in the program, nsys's seconds after the program's end (report and SQLite export),
the whole launch, and the export's kernel, runtime-call and NVTX rows.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/trace_costs.py``
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark import EIGHT_B  # benchmarks/ is on the path of a script run from it

from nsightflow.capture.launch import nsys

PROGRAM = r"""
import json, sys, time
from nsightflow.capture.inside import passes
from nsightflow.workloads import decoder
variant, args = sys.argv[1], json.loads(sys.argv[2])
w = decoder.build(**args)
passes.warm_up(w, 1)
passes.timed_pass(w)
passes.capture_range(True)
start = time.perf_counter()
if variant in ("both", "ranged"):
    passes.run_profiled(w, "nsightflow", warmup=0)
if variant in ("both", "probe"):
    passes.probe_pass(w, "nsightflow", count=True)
print(f"TRACED {time.perf_counter() - start:.2f}", flush=True)
print(f"END {time.time():.3f}", flush=True)
"""


def _rows(sqlite: Path) -> str:
    con = sqlite3.connect(sqlite)
    out = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        try:
            out.append(str(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]))
        except sqlite3.Error:
            out.append("-")
    return " ".join(f"{x:>8}" for x in out)


def main() -> None:
    nsys_bin = shutil.which("nsys")
    if nsys_bin is None:
        raise SystemExit("nsys is not on PATH")
    print(f"{'variant':8} {'traced s':>9} {'nsys after':>10} {'launch s':>9} {'kernels':>8} {'runtime':>8} {'nvtx':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("both", "probe", "ranged"):
            base = Path(tmp) / variant
            program = [sys.executable, "-c", PROGRAM, variant, json.dumps(EIGHT_B)]
            argv = nsys.profile_argv(nsys_bin, base, program, capture_range="none")
            start = time.time()
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            end = time.time()
            traced = float(next(ln.split()[1] for ln in out.splitlines() if ln.startswith("TRACED")))
            program_end = float(next(ln.split()[1] for ln in out.splitlines() if ln.startswith("END")))
            rows = _rows(base.with_suffix(".sqlite"))
            print(f"{variant:8} {traced:9.2f} {end - program_end:10.2f} {end - start:9.2f} {rows}", flush=True)


if __name__ == "__main__":
    main()
