"""Shared by the cost scripts: the 8B-shaped timeline launch as the timeline job runs it, and one launch timed with
the seconds it ran after the harness's last line (the profiler's work after the program, and the program's exit)."""

from __future__ import annotations

import subprocess
import time

from benchmark import EIGHT_B  # benchmarks/ is on the path of a script run from it

from nsightflow.capture.inside.harness import HarnessCall


def timeline_call(tmp: str) -> HarnessCall:
    """The 8B shape's timeline launch: timed pass, counting probe, ceilings, its outputs under ``tmp``."""
    return HarnessCall(
        "nsightflow.workloads.decoder:build",
        EIGHT_B,
        timed=True,
        flops_out=f"{tmp}/f.json",
        ceilings_out=f"{tmp}/c.json",
        out=f"{tmp}/h.json",
    )


def timed_launch(argv: list[str]) -> tuple[float, float, str]:
    """Run ``argv``: (its seconds, the seconds after the harness's last line, its output)."""
    start = time.time()
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    end = time.time()
    ended = [float(ln.split()[-1]) for ln in out.splitlines() if "the harness ends at" in ln]
    return end - start, (end - ended[-1]) if ended else float("nan"), out


def report_only(argv: list[str]) -> list[str]:
    """An ``nsys profile`` command line (nsightflow.capture.launch.nsys.profile_argv) that writes the report without its
    SQLite export."""
    return [("--export=none" if a == "--export=sqlite" else a) for a in argv]
