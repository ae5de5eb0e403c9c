"""On the GPU host: how a launch-bound decode step's wall time varies between launches of one program, with and
without nsys (the harness's timed pass, as the timeline job runs it), pinned to the GPU's CPUs or to one core.
Prints each launch's median and fastest step. Usage: python3 benchmarks/wall_noise.py [pairs]"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_gpu import _gpu_local_cpus  # noqa: E402
from wall_program import launch_argv  # noqa: E402  (benchmarks/ is on the path of a script run from it)

pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
with tempfile.TemporaryDirectory() as tmp:
    for label, cpus in (("GPU-local CPUs", _gpu_local_cpus()), ("one core", _gpu_local_cpus()[2:3])):
        rows = {False: [], True: []}
        for i in range(2 * pairs):
            profiled = i % 2 == 1
            argv, out = launch_argv(tmp, i, profiled)
            subprocess.run(argv, check=True, capture_output=True, preexec_fn=lambda c=cpus: os.sched_setaffinity(0, c))
            steps = json.loads(out.read_text())["program_wall_s"]["decode"]
            rows[profiled].append((statistics.median(steps) * 1e3, min(steps) * 1e3))
        for profiled, r in rows.items():
            meds = [round(m, 2) for m, _ in r]
            print(
                f"{label}, {'nsys timed pass' if profiled else 'no profiler    '}: launch medians {meds}, "
                f"median of medians {statistics.median(meds):.2f} ms, fastest {min(f for _, f in r):.2f} ms",
                flush=True,
            )
