"""What a profiled launch's exit costs, and whether ending it with ``os._exit`` once its outputs are written loses
anything: the 8B-shaped decoder's timeline launch under ``nsys profile`` (the timeline job's flags) and its windowed
launch under ncu (the plan made from that timeline, bf16 metrics), each ended normally and with ``os._exit``,
alternating. Each row: the launch's seconds, the seconds after the harness's last line, and what the tool recorded
(nsys: kernels and NVTX ranges in the SQLite export; ncu: launches profiled, results parsed from the raw export).

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``): ``python3 benchmarks/exit_costs.py``
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

from benchmark import EIGHT_B  # benchmarks/ is on the path of a script run from it
from launch_timing import timed_launch, timeline_call

from nsightflow import ncu_metrics
from nsightflow.capture.inside.harness import HarnessCall
from nsightflow.capture.launch import ncu, nsys
from nsightflow.capture.launch.ncu_capture import export
from nsightflow.capture.read.ncu_csv import parse_raw_csv
from nsightflow.capture.read.plan import make_plan

# The harness's exit as before its profiled launches ended with os._exit: main() returned, then the interpreter's
# teardown (the harness's own entry point, nsightflow.capture.inside.harness.launch, ends a timed or windowed
# launch at once).
NORMAL = "import sys; from nsightflow.capture.inside.harness import main; sys.exit(main(sys.argv[1:]))"


def _normal(argv: list[str]) -> list[str]:
    i = argv.index("-m")
    return argv[:i] + ["-c", NORMAL] + argv[i + 2 :]


def main() -> None:
    nsys_bin, ncu_bin = shutil.which("nsys") or "nsys", shutil.which("ncu") or "ncu"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        call = timeline_call(tmp)
        for name in ("normal", "os._exit", "normal", "os._exit"):
            argv = _normal(call.argv()) if name == "normal" else call.argv()
            base = Path(tmp, f"t_{len(rows)}")
            total, after, out = timed_launch(nsys.profile_argv(nsys_bin, base, argv, capture_range="none"))
            with sqlite3.connect(f"{base}.sqlite") as con:
                kernels = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
                ranges = con.execute("SELECT COUNT(*) FROM NVTX_EVENTS").fetchone()[0]
            rows.append((f"nsys, {name}", total, after, f"{kernels} kernels, {ranges} NVTX events"))
            print(rows[-1], flush=True)
        make_plan(
            Path(tmp, "t_0.sqlite"),
            "nsightflow",
            ["first", "last"],
            "representatives",
            f"{tmp}/plan.json",
            f"{tmp}/plan.log",
        )
        windowed = HarnessCall("nsightflow.workloads.decoder:build", EIGHT_B, warmup=0).windowed(f"{tmp}/plan.json")
        metrics = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
        for name in ("normal", "os._exit", "normal", "os._exit"):
            argv = _normal(windowed.argv) if name == "normal" else windowed.argv
            base = Path(tmp, f"n_{len(rows)}")
            total, after, out = timed_launch(
                ncu.capture_argv(
                    ncu_bin,
                    base,
                    argv,
                    metrics=metrics,
                    replay_mode="kernel",
                    clock_control="none",
                    cache_control="all",
                    comm_filter=False,
                )
            )
            raw, _ = parse_raw_csv(export(ncu_bin, f"{base}.ncu-rep", f"{tmp}/x.log"), "the export")
            rows.append(
                (f"ncu, {name}", total, after, f"{ncu.profiled_count(out)} profiled, {len(raw)} results exported")
            )
            print(rows[-1], flush=True)
            print("  " + "\n  ".join(out.splitlines()[-4:]), flush=True)
    print("| launch | seconds | after the harness's last line | recorded |")
    print("| --- | --- | --- | --- |")
    for name, total, after, what in rows:
        print(f"| {name} | {total:.2f} | {after:.2f} | {what} |")


if __name__ == "__main__":
    sys.exit(main())
