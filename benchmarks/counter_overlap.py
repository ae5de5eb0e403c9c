"""Whether the counter check (rule counters: ncu over a one-kernel probe, in a job beside the timeline's) slows the
timeline's program when they meet on the GPU: the 8B shape's timeline launch under nsys (the timeline job's flags,
the report only), alone and with the counter check started a chosen number of seconds after the harness's first
line, arms interleaved. Each line of the launch is stamped as it arrives, so the check's start and end are placed
among the harness's phases.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/counter_overlap.py [rounds] [delay_s ...]`` (delays: the check's start after the harness's first
line; default 0, 2 and 4 s). ``SHAPE=default`` runs the default config's decoder instead of the 8B shape.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace

from first_steps import SPLIT  # benchmarks/ is on the path of a script run from it
from launch_timing import report_only, timeline_call

from nsightflow.capture.launch import nsys
from nsightflow.capture.launch.preflight import probe_argv

PHASE = re.compile(r"nsightflow: ([a-z][a-z0-9 ()-]+): ([0-9.]+) s$")


@dataclass
class Stamped:
    """One launch: its seconds, its harness phases (seconds after the harness's first line, name, duration), the
    warm-up's first-step split, and when the counter check ran (start, end: after the harness's first line; ok)."""

    total: float
    phases: list[tuple[float, str, float]]
    split: tuple[str, ...] | None
    check: tuple[float, float, bool] | None


def _launch(argv: list[str], check: list[str] | None, delay: float) -> Stamped:
    """One timeline launch; with ``check``, the counter check started ``delay`` s after the harness's first line."""
    began = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    ran: list[tuple[float, float, bool]] = []
    zero = None

    def run_check() -> None:
        time.sleep(delay)
        start = time.time()
        out = subprocess.run(check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
        ran.append((start, time.time(), "probe ok" in out))

    thread = None
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.time()
        lines.append((now, line.rstrip("\n")))
        if zero is None and "the harness starts at" in line:
            zero = now
            if check is not None:
                thread = threading.Thread(target=run_check)
                thread.start()
    proc.wait()
    if thread is not None:
        thread.join()
    total = time.time() - began
    zero = began if zero is None else zero
    phases = [(t - zero, m.group(1), float(m.group(2))) for t, ln in lines if (m := PHASE.search(ln))]
    split = next((m.groups() for _, ln in lines if (m := SPLIT.search(ln))), None)
    window = (ran[0][0] - zero, ran[0][1] - zero, ran[0][2]) if ran else None
    return Stamped(total, phases, split, window)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    delays = [float(d) for d in sys.argv[2:]] or [0.0, 2.0, 4.0]
    nsys_bin, ncu_bin = shutil.which("nsys") or "nsys", shutil.which("ncu") or "ncu"
    check = probe_argv(ncu_bin, sys.executable)
    print(
        "| launch | seconds | check ran (s after the harness's first line) | prefill first step | decode first step "
        "| decode, the rest | timed pass | probe pass |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        call = timeline_call(tmp)
        if os.environ.get("SHAPE") == "default":
            call = replace(call, args={"batch": 4, "prompt": 512, "decode_steps": 8, "dtype": "bfloat16"})
        argv = report_only(nsys.profile_argv(nsys_bin, f"{tmp}/t", call.argv(), capture_range="none"))
        arms: list[tuple[str, float | None]] = [("alone", None)] + [(f"check at +{d:g} s", d) for d in delays]
        for _ in range(rounds):
            for name, delay in arms:
                got = _launch(argv, check if delay is not None else None, delay or 0.0)
                ran = "-"
                if got.check is not None:
                    ran = f"{got.check[0]:.2f} to {got.check[1]:.2f}" + ("" if got.check[2] else " (failed)")
                phases = {n: (at, took) for at, n, took in got.phases}
                timed, probe = phases.get("timed pass"), phases.get("probe pass (counting)")
                cells = [
                    f"{timed[1]:.2f} (ends at {timed[0]:.2f})" if timed else "?",
                    f"{probe[1]:.2f} (ends at {probe[0]:.2f})" if probe else "?",
                ]
                row = [name, f"{got.total:.2f}", ran, *(got.split or ("?", "?", "?")), *cells]
                print("| " + " | ".join(row) + " |", flush=True)
                if name != "alone":
                    where = "; ".join(f"{n} ends {at:.2f}" for at, n, _ in got.phases)
                    print(f"|   phases | {where} |||||||", flush=True)


if __name__ == "__main__":
    main()
