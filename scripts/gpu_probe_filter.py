"""GPU host probe: which ncu kernel-name filter really matches the selected kernels?

Records the default workload's timeline, plans the filtered captures, then runs ncu on the
prefill and last-decode-step plans with the kernel filter built three ways (mangled names,
demangled names, nsys short names with --kernel-name-base function) and one cheap metric.
Prints a table: expected launches (from the timeline) against launches ncu profiled.

Usage (GPU host, project root): python3 scripts/gpu_probe_filter.py WORKDIR
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from nsightflow import capture, ncu


def main(work: Path) -> int:
    work.mkdir(parents=True, exist_ok=True)
    program = capture.harness_argv("nsightflow.decoder:build", {}, "nsightflow", 1)
    rep = work / "timeline.nsys-rep"
    capture.timeline("nsys", program, rep, work / "timeline.log", 600)
    capture.stats("nsys", rep, work / "stats", work / "timeline.sqlite", work / "stats.log")
    plans = capture.selection(work / "stats", work / "timeline.sqlite", 10, 0.9, ["first", "middle", "last"],
                              work / "selected.csv", work / "plans", kernel_filter=True)
    con = sqlite3.connect(work / "timeline.sqlite")
    short = dict(con.execute("SELECT m.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                             "JOIN StringIds m ON m.id = k.mangledName JOIN StringIds s ON s.id = k.shortName"))
    rows = []
    for plan in plans:
        if plan.capture_id not in ("prefill", "decode.step7"):
            continue
        demangled = sorted({e["kernel"] for e in plan.expected})
        variants = {
            "mangled": ("mangled", plan.kernels),
            "demangled": ("demangled", demangled),
            "function": ("function", sorted({short.get(m, m) for m in plan.kernels})),
        }
        for label, (base, names) in variants.items():
            argv = ncu.capture_argv("ncu", work / f"{plan.capture_id}.{label}", program,
                                    nvtx_expr=ncu.nvtx_include(plan.domain, plan.stage), kernels=plan.kernels,
                                    launch_skip=plan.launch_skip, launch_count=plan.launch_count,
                                    metrics=["gpu__time_duration.sum"])
            i = argv.index("--kernel-name-base")
            argv[i + 1] = base
            argv[i + 3] = ncu.kernel_name_filter(names)
            start = time.time()
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            (work / f"{plan.capture_id}.{label}.log").write_text(proc.stdout)
            profiled = proc.stdout.count("==PROF== Profiling")
            rows.append((plan.capture_id, label, len(names), plan.launch_count, profiled, proc.returncode,
                         round(time.time() - start, 1)))
    print(f"{'capture':14} {'filter':10} {'names':>5} {'expected':>8} {'profiled':>8} {'rc':>3} {'s':>6}")
    for r in rows:
        print(f"{r[0]:14} {r[1]:10} {r[2]:5d} {r[3]:8d} {r[4]:8d} {r[5]:3d} {r[6]:6.1f}")
    (work / "probe.json").write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
