"""On the GPU host: where gpt-fast ``--compile``'s steady decode pace under nsightflow comes from. For each sample
count (``--samples``, default 2 and 8: the test's program and a longer run of it), three runs of the same command and
gpt-fast's own time per sample in each: plain (nothing of nsightflow), with the hook's timed mode alone (the
``sitecustomize`` and ``NSIGHTFLOW_HOOK`` a timed run has, no nsys launch beside it), and the workflow's timed run
(up to ``results/gptfast/manifest.json``: its nsys launch gated beside it); then the workflow's steady decode pace
and range wall against gpt-fast's own time per decode step in one warmed plain process
(tests/programs/gpt_fast_own_step.py). Needs NSIGHTFLOW_CORPUS with a snapshot of pytorch-labs/gpt-fast; run from
the project's root: ``python3 benchmarks/gpt_fast_wall.py [--samples 2,8]``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_corpus as corpus  # noqa: E402
from conftest import snakemake  # noqa: E402

from nsightflow.capture.inside.hook_settings import HOOK_ENV, HookSettings  # noqa: E402
from nsightflow.capture.launch.hook_site import site_dir  # noqa: E402


def ms(xs: list[float]) -> list[float]:
    return [round(x * 1e3, 3) for x in xs]


def own_times(argv: list[str], folder: Path, tmp: Path, hooked: bool) -> list[float]:
    """gpt-fast's own time per sample in one run of ``argv``: plain, or with the timed hook alone."""
    env = dict(os.environ)
    if hooked:
        env["PYTHONPATH"] = os.pathsep.join([str(site_dir(tmp)), *filter(None, [env.get("PYTHONPATH")])])
        env[HOOK_ENV] = HookSettings("timed", str(tmp / "timed.json")).to_env()
    out = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, check=True, timeout=600).stdout
    return corpus._own_sample_times(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", default="2,8")
    counts = [int(n) for n in p.parse_args().samples.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="gpt-fast-wall-"))
    try:
        for n in counts:
            corpus.SAMPLES = n
            base = tmp / f"s{n}"
            base.mkdir()
            folder, argv = corpus._gpt_fast(base, "cuda", True)
            began = time.monotonic()
            plain = own_times(argv, folder, base, False)
            hooked = own_times(argv, folder, base, True)
            print(f"{n} samples: gpt-fast's own ms a sample, plain {ms(plain)}, timed hook alone {ms(hooked)} "
                  f"({time.monotonic() - began:.0f} s)")  # fmt: skip
            work = corpus._workflow(base, {"name": "gptfast", "command": argv, "cwd": str(folder)}, "nsight")
            began = time.monotonic()
            snakemake(work, "--cores", "1", "results/gptfast/manifest.json")
            run = work / "results" / "gptfast"
            manifest = json.loads((run / "manifest.json").read_text())
            apart = {w["step"] for w in manifest["warmup_steps"] if w["stage"] == "decode"}
            paces = [x for i, x in enumerate(manifest["every_pace_s"]["decode"]) if x is not None and i not in apart]
            walls = [x for i, x in enumerate(manifest["every_wall_s"]["decode"]) if i not in apart]
            timed = corpus._own_sample_times(run / "logs" / "timeline.log")
            print(f"{n} samples, workflow ({time.monotonic() - began:.0f} s): own ms a sample in its timed run "
                  f"{ms(timed)}; steady decode pace {statistics.median(paces) * 1e3:.4f} ms, range wall "
                  f"{statistics.median(walls) * 1e3:.4f} ms (of {len(paces)}); every pace {ms(paces)}")  # fmt: skip
        own = corpus._own_clock(argv, folder, tmp / "own-hooked.json")["step_s"]
        print(f"gpt-fast's own time per decode step, one warmed plain process: {own * 1e3:.4f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
