"""On the GPU host: the wall-time test's program (a launch-bound decode, 16 layers, batch 1) alone and under nsys (the
harness's timed pass, as the timeline job runs it), with nsys itself pinned to the program's one CPU (as the test
pinned every launch: nsys's own processes then share that core with the program) or free, the program alone pinned
inside it (``taskset``). Arms interleaved launch by launch; prints each launch's median and fastest decode step and,
per arm, the median of the launches' fastest steps and medians, and the fastest step of all.
Usage: python3 benchmarks/wall_pinning.py [launches per arm]"""

from __future__ import annotations

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


def main() -> None:
    per_arm = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cpu = (_gpu_local_cpus()[2:3] or _gpu_local_cpus())[0]
    arms = ["alone, pinned", "nsys pinned with it", "nsys free, program pinned"]
    got: dict[str, list[tuple[float, float, float]]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(per_arm * len(arms)):
            arm = arms[i % len(arms)]
            pin = {cpu} if arm != "nsys free, program pinned" else None
            wrap = None if pin else ["taskset", "-c", str(cpu)]
            argv, out = launch_argv(tmp, i, profiled=arm != "alone, pinned", wrap=wrap)
            subprocess.run(
                argv,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=(lambda p=pin: os.sched_setaffinity(0, p)) if pin else None,
            )
            record = json.loads(out.read_text())
            steps = [s * 1e3 for s in record["program_wall_s"]["decode"]]
            ranged = [s * 1e3 for s in (record.get("stage_wall_s") or {}).get("decode", [])] or [float("nan")]
            got[arm].append((statistics.median(steps), min(steps), min(ranged)))
            print(
                f"{arm:26s} median {statistics.median(steps):6.2f} ms, fastest {min(steps):6.2f} ms; traced pass "
                f"fastest {min(ranged):6.2f} ms",
                flush=True,
            )
    ref = statistics.median(f for _, f, _ in got[arms[0]])
    for arm, rows in got.items():
        fast = statistics.median(f for _, f, _ in rows)
        print(
            f"{arm:26s}: median of medians {statistics.median(m for m, _, _ in rows):6.2f} ms, median of fastest "
            f"{fast:6.2f} ms ({fast / ref - 1:+.1%}), fastest of all {min(f for _, f, _ in rows):6.2f} ms; traced pass "
            f"median of fastest {statistics.median(r for _, _, r in rows):6.2f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
