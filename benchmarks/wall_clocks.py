"""On the GPU host: whether the launch-bound decode step's wandering wall time (the wall-time test's program) follows
the GPU's clocks. Launches the test's program alternately alone and under nsys (the harness's timed pass, as the
timeline job runs it), pinned to one of the GPU's CPUs (as the wall-time test then pinned it), while ``nvidia-smi``
samples the SM clock, power and performance state every 50 ms; prints each launch's median and fastest step with the
clocks seen during its timed pass. Usage: python3 benchmarks/wall_clocks.py [pairs]"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_gpu import _gpu_local_cpus  # noqa: E402
from wall_program import launch_argv  # noqa: E402  (benchmarks/ is on the path of a script run from it)

QUERY = [
    "nvidia-smi",
    "--query-gpu=timestamp,clocks.sm,power.draw,pstate",
    "--format=csv,noheader,nounits",
    "-lms",
    "50",
]


def _samples(path: Path) -> list[tuple[float, float, float, str]]:
    """(epoch, SM MHz, watts, pstate) per nvidia-smi line."""
    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            stamp += float("0." + parts[0].split(".")[1]) if "." in parts[0] else 0.0
            rows.append((stamp, float(parts[1]), float(parts[2]), parts[3]))
        except ValueError:
            continue
    return rows


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cpus = _gpu_local_cpus()[2:3] or _gpu_local_cpus()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "smi.csv"
        with open(log, "w") as fh:
            smi = subprocess.Popen(QUERY, stdout=fh, stderr=subprocess.DEVNULL)
        try:
            for i in range(2 * pairs):
                profiled = i % 2 == 1
                argv, out = launch_argv(tmp, i, profiled)
                proc = subprocess.Popen(
                    argv,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    preexec_fn=lambda: os.sched_setaffinity(0, cpus),
                )
                window = None
                assert proc.stderr is not None
                for line in proc.stderr:
                    if line.startswith("nsightflow: timed pass:"):
                        now = time.time()
                        window = (now - float(line.split()[-2]), now)
                proc.wait()
                steps = [s * 1e3 for s in json.loads(out.read_text())["program_wall_s"]["decode"]]
                seen = [s for s in _samples(log) if window and window[0] - 0.05 <= s[0] <= window[1] + 0.05]
                clocks = sorted({int(s[1]) for s in seen})
                label = "nsys timed pass" if profiled else "no profiler    "
                watts = max((s[2] for s in seen), default=float("nan"))
                print(
                    f"{label}: steps median {statistics.median(steps):6.2f} ms, fastest {min(steps):6.2f} ms, "
                    f"first {steps[0]:6.2f}, last {steps[-1]:6.2f}; SM MHz during the pass "
                    f"{clocks[:1] + clocks[-1:]} ({len(seen)} samples), watts {watts:.0f} max, "
                    f"pstates {sorted({s[3] for s in seen})}",
                    flush=True,
                )
        finally:
            smi.terminate()
            smi.wait()


if __name__ == "__main__":
    main()
