"""Whether the timeline's probe pass launched what the program launched: for every ``timeline.sqlite`` under the given
folders (results the GPU tier brought back, ``scripts/gpu_run.sh``), the steps whose ranged-pass launches are a twin of
the probe pass's (the same kernels in the same order), and whether every step has as many launches in both passes,
beside what the run's first pass did once (``first_pass_work`` in its manifest).

Usage: ``python3 benchmarks/probe_twins.py FOLDER...`` (on the CPU; reads the exports only).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nsightflow.capture.read.attribution import read_timeline


def main(folders: list[str]) -> None:
    for sqlite in sorted(p for f in folders for p in Path(f).rglob("timeline/timeline.sqlite")):
        run = sqlite.parent.parent
        manifest = run / "manifest.json"
        record = json.loads(manifest.read_text()) if manifest.exists() else {}
        launches = read_timeline(sqlite, record.get("domain") or "nsightflow").launches
        ranged, probe = launches[launches["pass_"] == "ranged"], launches[launches["pass_"] == "probe"]
        if probe.empty:
            print(f"{run}: no probe pass")
            continue
        twins = ranged.groupby(["stage", "step"])["twin"].all()
        counts = ranged.groupby(["stage", "step"]).size().equals(probe.groupby(["stage", "step"]).size())
        print(
            f"{run}: {int(twins.sum())} of {len(twins)} steps twins, same launches per step: {counts} "
            f"({len(ranged)} ranged, {len(probe)} probe); first pass: {record.get('first_pass_work', 'not recorded')}"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["results"])
