"""Where the timeline's launch spends its time against the same program alone, phase by phase, on one machine.

Runs the 8B-shaped decoder's harness as the timeline job runs it (``--timed``, the counting probe, the ceilings)
alone and under ``nsys profile`` with the timeline job's flags (``--export=none``: the report only), twice each,
alternating, and prints each launch's harness phases, its seconds and nsys's seconds after the program. Then a
program of a few launches under nsys, for nsys's fixed cost after a program.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/launch_phases.py``
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time

from launch_timing import report_only, timed_launch, timeline_call  # benchmarks/ is on the path of a script run from it

from nsightflow.capture.launch import nsys

TINY = (
    "import torch; x = torch.ones(4, device='cuda'); import torch.cuda.profiler as p; p.start(); x.add_(1); "
    "print(x.sum().item())"
)


def _launch(argv: list[str]) -> tuple[float, float, dict[str, float]]:
    total, after, out = timed_launch(argv)
    phases = {m[1]: float(m[2]) for m in re.finditer(r"nsightflow: ([a-z][^:\n]*): ([0-9.]+) s$", out, re.M)}
    starts = [float(ln.split()[-1]) for ln in out.splitlines() if "the harness starts at" in ln]
    if starts:  # the harness's start on the epoch clock, against the launch's (timed_launch's) start
        phases["interpreter start"] = starts[-1] - (time.time() - total)
    return total, after, phases


def main() -> None:
    nsys_bin = shutil.which("nsys") or "nsys"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        program = timeline_call(tmp).argv()
        traced = report_only(nsys.profile_argv(nsys_bin, f"{tmp}/t", program, capture_range="none"))
        for name, argv in [("alone", program), ("nsys", traced)] * 2:
            rows.append((name, *_launch(argv)))
        tiny = nsys.profile_argv(nsys_bin, f"{tmp}/tiny", [sys.executable, "-c", TINY], capture_range="none")
        tiny_total, _, _ = _launch(report_only(tiny))
        plain_tiny, _, _ = _launch([sys.executable, "-c", TINY])
    keys = list(dict.fromkeys(k for r in rows for k in r[3]))
    print("| phase | " + " | ".join(r[0] for r in rows) + " |")
    print("| --- |" + " --- |" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{r[3].get(k, float('nan')):.2f}" for r in rows) + " |")
    print("| after the harness's end | " + " | ".join(f"{r[2]:.2f}" if r[2] is not None else "" for r in rows) + " |")
    print("| launch | " + " | ".join(f"{r[1]:.2f}" for r in rows) + " |")
    print(f"a few launches: {plain_tiny:.2f} s alone, {tiny_total:.2f} s under nsys (--export=none)")


if __name__ == "__main__":
    main()
