"""On the GPU host: whether nsys slows kernel launches before its capture range opens, over enough processes to see
past one process's spread (benchmarks/launch_spread.py): each launch runs 34,000 one-element adds after a warm-up and
prints its µs per launch; arms interleaved: alone, under nsys with the timeline job's flags and no capture range
opened (as the harness's timed pass runs), and under nsys inside the capture range (traced), for contrast.
Usage (from the project root, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/launch_nsys.py [launches per arm]``
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile

from launch_timing import report_only  # benchmarks/ is on the path of a script run from it
from ncu_launch_costs import loop_argv, loop_results

from nsightflow.capture.launch import nsys


def main() -> None:
    per_arm = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    nsys_bin = shutil.which("nsys") or "nsys"
    got: dict[str, list[float]] = {"alone": [], "nsys, before its capture range": [], "nsys, traced": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(per_arm):
            for name in got:
                program = loop_argv(start_range=name == "nsys, traced")
                argv = program
                if name != "alone":
                    argv = report_only(nsys.profile_argv(nsys_bin, f"{tmp}/r{i}", program, capture_range="none"))
                got[name] += loop_results(subprocess.run(argv, capture_output=True, text=True).stdout)
    ref = statistics.median(got["alone"])
    for name, values in got.items():
        med = statistics.median(values)
        print(
            f"{name:32s} µs a launch, median of {len(values)} processes {med:.2f} ({med / ref - 1:+.1%}), quartiles "
            f"{statistics.quantiles(values, n=4)[0]:.2f} to {statistics.quantiles(values, n=4)[2]:.2f}, all "
            f"{', '.join(f'{v:.2f}' for v in values)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
