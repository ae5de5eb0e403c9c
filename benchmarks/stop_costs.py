"""Whether the timeline's launch could trace the program's first pass and time the steady state after it: the
8B-shaped decoder under ``nsys profile`` with ``--capture-range-end=stop``, its counting and marking probe pass as the
first pass (no warm-up), then ``cudaProfilerStop`` (nsys flushes there), then the timed pass; against the timeline
launch as the job runs it (warm-up, timed pass, then the probe pass traced to the exit). Prints each launch's seconds,
its phases and the kernels recorded.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``): ``python3 benchmarks/stop_costs.py``
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import sys
import tempfile

from benchmark import EIGHT_B  # benchmarks/ is on the path of a script run from it
from launch_timing import timed_launch, timeline_call

from nsightflow.capture.launch import nsys

FIRST_PASS_TRACED = r"""
import json, os, sys, time
import torch.cuda.profiler as profiler
from nsightflow.capture.inside import passes
from nsightflow.capture.inside.progress import phase
from nsightflow.workloads import decoder
with phase("workload built"):
    w = decoder.build(**json.loads(sys.argv[1]))
profiler.start()
passes.counting_pass(w, "nsightflow")
with phase("cudaProfilerStop (nsys flushes)"):
    profiler.stop()
with phase("timed pass"):
    passes.timed_pass(w)
print(f"nsightflow: the harness ends at {time.time():.3f}", file=sys.stderr, flush=True)
sys.stderr.flush()
os._exit(0)
"""


def main() -> None:
    nsys_bin = shutil.which("nsys") or "nsys"
    with tempfile.TemporaryDirectory() as tmp:
        variants = {
            "as the job runs it": nsys.profile_argv(
                nsys_bin, f"{tmp}/a", timeline_call(tmp).argv(), capture_range="none"
            ),
            "first pass traced, then stop": [
                ("--capture-range-end=stop" if a == "--capture-range-end=none" else a)
                for a in nsys.profile_argv(
                    nsys_bin,
                    f"{tmp}/b",
                    [sys.executable, "-c", FIRST_PASS_TRACED, json.dumps(EIGHT_B)],
                    capture_range="none",
                )
            ],
        }
        for _ in range(2):
            for name, argv in variants.items():
                total, after, out = timed_launch(argv)
                base = argv[argv.index("-o") + 1]
                with sqlite3.connect(f"{base}.sqlite") as con:
                    kernels = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
                phases = re.findall(r"nsightflow: ([a-zA-Z][^:\n]*): ([0-9.]+) s$", out, re.M)
                print(f"{name}: {total:.2f} s, {after:.2f} s after the program, {kernels} kernels", flush=True)
                print("  " + "; ".join(f"{k} {v}" for k, v in phases), flush=True)


if __name__ == "__main__":
    main()
