"""Where the 8B-shaped decoder's first steps get slow: its warm-up pass's first prefill and decode steps (library
handles, module loading, one-time plans) in the program alone (the benchmark's reference), in the timeline job's
harness call with no profiler, and in that call under nsys (the timeline job's flags, the report only) and under
ncu (``--profile-from-start off``, nothing profiled), in rounds on one machine.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/first_steps.py [rounds] [arm ...]``
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile

from benchmark import EIGHT_B  # benchmarks/ is on the path of a script run from it
from launch_timing import report_only, timed_launch, timeline_call

from nsightflow.capture.inside.harness import HarnessCall
from nsightflow.capture.launch import nsys
from nsightflow.capture.launch.hostfacts import THREAD_VARS

SPLIT = re.compile(
    r"warm-up pass 1 by stage: prefill ([0-9.]+) s first step, [0-9.]+ s the rest, decode ([0-9.]+) s "
    r"first step, ([0-9.]+) s the rest"
)
SNAKEMAKE_THREADS = list(THREAD_VARS)
PHASE = re.compile(r"nsightflow: (workload built|warm-up pass 1): ([0-9.]+) s$", re.M)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    only = sys.argv[2:]  # arms by name (all by default)
    nsys_bin, ncu_bin = shutil.which("nsys") or "nsys", shutil.which("ncu") or "ncu"
    print("| launch | seconds | built | warm-up | prefill first step | decode first step | decode, the rest |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        timeline = timeline_call(tmp).argv()
        arms = {
            "program alone": HarnessCall("nsightflow.workloads.decoder:build", EIGHT_B).argv(),
            "timeline call, no profiler": timeline,
            "timeline call under nsys": report_only(
                nsys.profile_argv(nsys_bin, f"{tmp}/t", timeline, capture_range="none")
            ),
            "program under ncu, nothing profiled": [ncu_bin, "--profile-from-start", "off", "--clock-control=none"]
            + HarnessCall("nsightflow.workloads.decoder:build", EIGHT_B).argv(),
        }
        # What a Snakemake job's process gets (snakemake.shell: one thread per library for a rule of one thread)
        one = [f"{k}=1" for k in SNAKEMAKE_THREADS]
        arms["program alone, Snakemake's thread settings"] = ["env", *one, *arms["program alone"]]
        arms["timeline call under nsys, Snakemake's thread settings"] = [
            "env",
            *one,
            *arms["timeline call under nsys"],
        ]
        for _ in range(rounds):
            for name, argv in arms.items():
                if only and name not in only:
                    continue
                total, _, out = timed_launch(argv)
                phases = dict(PHASE.findall(out))
                split = SPLIT.search(out)
                cells = list(split.groups()) if split else ["?"] * 3
                print(
                    f"| {name} | {total:.2f} | {phases.get('workload built', '?')} | "
                    f"{phases.get('warm-up pass 1', '?')} | " + " | ".join(cells) + " |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
