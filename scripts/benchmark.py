"""Benchmark: command-to-report time of the default workflow, with the kernel filter on and off.

Runs `snakemake --cores 1 results/report.html` in fresh copies of the workflow (GPU host) and prints a
table: variant, ncu captures, launches profiled, seconds. Usage: python3 scripts/benchmark.py [variant ...]
Variants: filter (default config), nofilter (ncu.kernel_filter false), program (the workload alone).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import copy_workflow  # noqa: E402


def run(variant: str) -> tuple[int, int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp))
        if variant == "program":
            start = time.time()
            subprocess.run([sys.executable, "-m", "nsightflow.harness"], check=True, cwd=wf)
            return 0, 0, time.time() - start
        cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
        cfg["ncu"]["kernel_filter"] = variant == "filter"
        (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        start = time.time()
        subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "results/report.html"], cwd=wf, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.time() - start
        plans = [json.loads(p.read_text()) for p in (wf / "results").glob("*/plans/*.json")]
        return len(plans), sum(p["launch_count"] for p in plans), seconds


if __name__ == "__main__":
    variants = sys.argv[1:] or ["program", "filter", "nofilter"]
    rows = [(v, *run(v)) for v in variants]
    print(f"{'variant':10} {'captures':>8} {'launches':>8} {'seconds':>8}")
    for v, caps, launches, seconds in rows:
        print(f"{v:10} {caps:8d} {launches:8d} {seconds:8.1f}")
