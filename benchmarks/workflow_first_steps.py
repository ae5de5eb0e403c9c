"""Whether the 8B shape's workflow launches start cold: its timeline's and capture's harness phases (the warm-up pass's
first steps, the windowed pass) in a cold workflow run, again with only the run's results deleted (the preflight and
the counter check kept, so nothing runs beside the timeline), then cold once more; after one program launch alone.

Usage (from the project root on the GPU host, after ``. .gpu-bundle/activate.sh``):
``python3 benchmarks/workflow_first_steps.py``
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark import EIGHT_B, run_snakemake, workflow_copy  # benchmarks/ is on the path of a script run from it

SHOW = re.compile(r"nsightflow: (workload built|warm-up pass 1 by stage|probe pass \([a-z]+\)|timed pass): (.*)$", re.M)


def _phases(log: Path) -> str:
    return "; ".join(f"{k} {v}" for k, v in SHOW.findall(log.read_text())) if log.exists() else "?"


def main() -> None:
    start = time.time()
    subprocess.run(
        [sys.executable, "-m", "nsightflow.capture.inside.harness", "--args", json.dumps(EIGHT_B)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print(f"program alone: {time.time() - start:.1f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        eight_b = [{"name": "8b", "callable": "nsightflow.workloads.decoder:build", "args": EIGHT_B}]
        wf = workflow_copy(Path(tmp), lambda cfg: cfg.update(workloads=eight_b))
        for label in ("cold", "the run's results deleted (preflight kept)", "cold again"):
            if label.startswith("the run's"):
                shutil.rmtree(wf / "results" / "8b")
                (wf / "results" / "report.html").unlink()
            elif label == "cold again":
                shutil.rmtree(wf / "results")
            began = time.time()
            run_snakemake(wf, "results/report.html", {**os.environ, "PYTHONPATH": str(wf / "tests")})
            logs = wf / "results" / "8b" / "logs"
            print(f"{label}: {time.time() - began:.1f} s", flush=True)
            print(f"  timeline: {_phases(logs / 'timeline.log')}", flush=True)
            print(f"  capture: {_phases(logs / 'ncu_capture.log')}", flush=True)


if __name__ == "__main__":
    main()
