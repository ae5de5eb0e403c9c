"""What ncu's and nsys's own flags cost, one launch per flag set. On the GPU host: ``python3 benchmarks/flag_costs.py``.

ncu: the program of ``benchmarks/window_costs.py`` (2,000 decode-like launches; its 'first' variant profiles each of 12
kernels' first launch, each in its own window, as the workflow's plan mostly does), under the capture's flags and
metrics, then with one thing changed per row; each row prints the loop's seconds, the replay passes per kernel
and ms per profiled kernel (against the same flags with nothing profiled). One more launch asks ncu for the raw CSV
page at the end of the capture itself (no ``ncu --import`` after it): whether it prints one.

nsys: the 8B-shaped decoder's timeline launch (the workflow's flags), then with one flag changed; each row prints
the launch's seconds and how long nsys worked after the program's end.

``--rounds N --only "as captured" --only "no --nvtx" --no-nsys``: those ncu rows N times each, in turns, and each
row's median (one launch per row is within the host's spread of another)."""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from launch_timing import timed_launch, timeline_call
from window_costs import capture_argv

from nsightflow import ncu_metrics
from nsightflow.capture.launch import ncu, nsys


def _ncu_rows(ncu_bin: str, tmp: str, rounds: int = 1, only: list[str] | None = None) -> None:
    bf16 = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    no_caches = [m for m in bf16 if not m.startswith(("lts__", "l1tex__"))]

    def argv(name: str, variant: str, metrics: list[str], drop: tuple[str, ...] = (), add: tuple[str, ...] = ()):
        base = [a for a in capture_argv(ncu_bin, f"{tmp}/{name}", variant, metrics) if a not in drop]
        i = base.index("--metrics")
        return base[:i] + list(add) + base[i:]

    rows = {
        "as captured": ("first", bf16, (), ()),
        "no --nvtx": ("first", bf16, ("--nvtx",), ()),
        "no L1/L2 bytes": ("first", no_caches, (), ()),
        "time only": ("first", ["gpu__time_duration.sum"], (), ()),
        "--cache-control none": ("first", bf16, ("--cache-control=all",), ("--cache-control=none",)),
        "raw CSV at the end": (
            "first",
            bf16,
            (),
            ("--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", "mangled"),
        ),
    }
    rows = {k: v for k, v in rows.items() if not only or k in only}
    idle = None
    per_row: dict[str, list[float]] = {}
    print(f"{'ncu':24} {'profiled':>8} {'passes':>7} {'loop s':>7} {'ncu s':>7} {'ms/kernel':>10}", flush=True)
    # rounds: the rows in turns, each round a launch of every row, so a drift of the host's pace falls on all of them
    turns = [(name, spec) for _ in range(rounds) for name, spec in rows.items()]
    for name, (variant, metrics, drop, add) in [("nothing profiled", ("idle", bf16, (), ())), *turns]:
        start = time.perf_counter()
        out = subprocess.run(
            argv(name.replace(" ", "_").replace("/", "_"), variant, metrics, drop, add),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ).stdout
        total = time.perf_counter() - start
        loop = float(next(ln.split()[1] for ln in out.splitlines() if ln.startswith("LOOP")))
        n = ncu.profiled_count(out)
        passes = sorted({int(m) for m in re.findall(r"- (\d+) pass", out)})
        idle = loop if idle is None else idle
        per = (loop - idle) / n * 1e3 if n else float("nan")
        print(f"{name:24} {n:>8} {str(passes):>7} {loop:7.2f} {total:7.2f} {per:10.1f}", flush=True)
        per_row.setdefault(name, []).append(per)
        if name == "raw CSV at the end":
            csv_lines = [ln for ln in out.splitlines() if ln.startswith('"ID"') or ln.startswith('"0"')]
            print(
                f"  raw CSV printed by the capture itself: {len(csv_lines)} header/first rows; "
                f"report written: {Path(tmp, name.replace(' ', '_') + '.ncu-rep').exists()}",
                flush=True,
            )
            print("  " + "\n  ".join(out.splitlines()[-4:])[:600], flush=True)
    if rounds > 1:
        for name, values in per_row.items():
            if name != "nothing profiled":
                print(f"{name:24} ms per profiled kernel, median of {len(values)}: {statistics.median(values):.1f}")


def _nsys_rows(nsys_bin: str, tmp: str) -> None:
    help_text = subprocess.run(
        [nsys_bin, "profile", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ).stdout
    flags = [ln.strip().split()[0] for ln in help_text.splitlines() if ln.strip().startswith("--cuda")]
    print("nsys profile's --cuda* flags:", ", ".join(flags), flush=True)
    program = timeline_call(tmp).argv()
    base = nsys.profile_argv(nsys_bin, f"{tmp}/t", program, capture_range="none")
    variants = {"as captured": base}
    if "--cuda-event-trace" in " ".join(flags):
        variants["--cuda-event-trace=false"] = base[:2] + ["--cuda-event-trace=false"] + base[2:]
    variants["no --cuda-graph-trace=node"] = [a for a in base if a != "--cuda-graph-trace=node"]
    print(f"{'nsys':30} {'launch s':>9} {'after program s':>16}", flush=True)
    for name, argv in variants.items():
        total, after, _ = timed_launch(argv)
        print(f"{name:30} {total:9.2f} {after:16.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="launches of each ncu row, in turns")
    parser.add_argument("--only", action="append", help="an ncu row's name (again for more); default: every row")
    parser.add_argument("--no-nsys", action="store_true", help="leave out the nsys rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _ncu_rows(shutil.which("ncu") or "ncu", tmp, args.rounds, args.only)
        if not args.no_nsys:
            _nsys_rows(shutil.which("nsys") or "nsys", tmp)


if __name__ == "__main__":
    main()
