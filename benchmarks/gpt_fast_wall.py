"""On the GPU host: gpt-fast ``--compile``'s steady decode wall as nsightflow's timed run measures it (the workflow up
to ``results/gptfast/manifest.json``) against gpt-fast's own time per decode step from two plain runs (no profiler,
nothing of nsightflow: tests/test_corpus.py's differential of NEW and LONG new tokens). Needs NSIGHTFLOW_CORPUS with a
snapshot of pytorch-labs/gpt-fast; run from the project's root: ``python3 benchmarks/gpt_fast_wall.py``."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_corpus as corpus  # noqa: E402
from conftest import snakemake  # noqa: E402


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gpt-fast-wall-"))
    try:
        folder, argv = corpus._gpt_fast(tmp, "cuda", True)
        work = corpus._workflow(tmp, {"name": "gptfast", "command": argv, "cwd": str(folder)}, "nsight")
        began = time.monotonic()
        snakemake(work, "--cores", "1", "results/gptfast/manifest.json")
        manifest = json.loads((work / "results" / "gptfast" / "manifest.json").read_text())
        ours = statistics.median(manifest["program_wall_s"]["decode"])
        print(f"workflow to the manifest {time.monotonic() - began:.0f} s; set apart {manifest['warmup_steps']}")
        for stage in ("prefill", "decode"):
            print(f"{stage} walls ms", [round(x * 1e3, 4) for x in manifest["every_wall_s"][stage]])
        began = time.monotonic()
        own = corpus._own_decode_step_s(argv, folder)
        print(f"steady decode wall {ours * 1e3:.4f} ms; gpt-fast's own clock {own * 1e3:.4f} ms "
              f"({ours / own - 1:+.2%}); plain runs {time.monotonic() - began:.0f} s")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
