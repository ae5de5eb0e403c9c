"""On the GPU host: how much one process's cost per kernel launch differs from the next's, and whether fixing what
changes between processes narrows it: Python's hash seed and the address layout (``PYTHONHASHSEED=0``, ``setarch -R``),
the CPU (pinned to one of the GPU's). Each launch runs 34,000 one-element adds after a warm-up and prints its µs per
launch; arms interleaved. Usage (from the project root, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/launch_spread.py [launches per arm]``"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ncu_launch_costs import loop_argv, loop_results  # noqa: E402  (benchmarks/ is on the path of a script run from it)
from test_gpu import _gpu_local_cpus  # noqa: E402

PROGRAM = loop_argv()


def main() -> None:
    per_arm = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cpu = str((_gpu_local_cpus()[2:3] or _gpu_local_cpus())[0])
    arms = {
        "as launched": (PROGRAM, {}),
        "hash seed 0, no address randomization": (["setarch", "-R", *PROGRAM], {"PYTHONHASHSEED": "0"}),
        "pinned to one of the GPU's CPUs": (["taskset", "-c", cpu, *PROGRAM], {}),
        "all three": (["taskset", "-c", cpu, "setarch", "-R", *PROGRAM], {"PYTHONHASHSEED": "0"}),
    }
    got: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(per_arm):
        for name, (argv, env) in arms.items():
            got[name] += loop_results(
                subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env}).stdout
            )
    for name, values in got.items():
        print(
            f"{name:40s} µs a launch: {', '.join(f'{v:.2f}' for v in values)} (median {statistics.median(values):.2f}, "
            f"max/min {max(values) / min(values):.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
