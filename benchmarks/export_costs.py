"""Where nsys's work after the timeline's program goes, and what ncu prints when it writes its raw CSV page itself.

1. The 8B-shaped decoder under ``nsys profile`` with the timeline job's flags but ``--export=none``: the seconds nsys
   spends after the program (the .nsys-rep alone), then ``nsys export --type sqlite`` of that report, timed apart.
2. ncu over window_costs' program (each kernel's first launch in its own window) with ``--csv --page raw`` added:
   where its "Profiling" lines and the CSV rows go (stdout, stderr), and whether the report is still written.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/export_costs.py``
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from launch_timing import report_only, timed_launch, timeline_call  # benchmarks/ is on the path of a script run from it
from window_costs import capture_argv

from nsightflow import ncu_metrics
from nsightflow.capture.launch import ncu, nsys


def _nsys(nsys_bin: str, tmp: str) -> None:
    argv = nsys.profile_argv(nsys_bin, f"{tmp}/t", timeline_call(tmp).argv(), capture_range="none")
    total, after, out = timed_launch(report_only(argv))
    print(f"nsys profile --export=none: launch {total:.2f} s, after the program {after:.2f} s")
    print("  " + "\n  ".join(ln for ln in out.splitlines() if ln.startswith("nsightflow:")))
    rep = Path(f"{tmp}/t.nsys-rep")
    print(f"  report {rep.stat().st_size / 1e6:.1f} MB")
    for extra in ([], ["--lazy=false"]):
        sq = Path(tmp, "t.sqlite")
        sq.unlink(missing_ok=True)
        start = time.time()
        res = subprocess.run(
            [nsys_bin, "export", "--type", "sqlite", *extra, "--force-overwrite=true", "-o", str(sq), str(rep)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        print(
            f"nsys export --type sqlite {' '.join(extra)}: {time.time() - start:.2f} s, rc {res.returncode}, "
            f"{sq.stat().st_size / 1e6 if sq.exists() else 0:.1f} MB"
        )
    help_text = subprocess.run(
        [nsys_bin, "export", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ).stdout
    print(
        "nsys export options: "
        + ", ".join(ln.strip().split()[0] for ln in help_text.splitlines() if ln.strip().startswith("--"))
    )


def _ncu_csv(ncu_bin: str, tmp: str) -> None:
    metrics = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    base = capture_argv(ncu_bin, f"{tmp}/csv", "first", metrics)
    i = base.index("--metrics")
    argv = base[:i] + ["--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", "mangled"] + base[i:]
    res = subprocess.run(argv, capture_output=True, text=True)
    for name, text in (("stdout", res.stdout), ("stderr", res.stderr)):
        lines = text.splitlines()
        rows = [ln for ln in lines if ln.startswith('"')]
        print(
            f"ncu --csv at the end, {name}: {len(lines)} lines, {ncu.profiled_count(text)} 'Profiling' counted, "
            f"{len(rows)} quoted CSV lines, first lines:"
        )
        print("  " + "\n  ".join(ln[:200] for ln in lines[:6]))
    print(f"  rc {res.returncode}, report written: {Path(tmp, 'csv.ncu-rep').exists()}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _ncu_csv(shutil.which("ncu") or "ncu", tmp)
        _nsys(shutil.which("nsys") or "nsys", tmp)


if __name__ == "__main__":
    main()
