"""gpt-fast's own time per decode step, in one process with nothing of nsightflow in it: its ``generate()`` called as
its ``main()`` calls it (the model loaded, ``decode_one_token`` compiled as ``--compile`` compiles it, the call timed
between two device synchronisations), for NEW and LONG new tokens in turns, so that the two lengths share the
process's pace; the difference of their median times over the LONG - NEW extra steps is a decode step (set-up,
prefill and copies, the same at both lengths, cancel). Run in gpt-fast's folder (pytorch-labs/gpt-fast, BSD-3-Clause:
tests/test_corpus.py's corpus); prints one JSON line ``{"new": [s...], "long": [s...], "step_s": s}``.

The KV cache is set up at the longer length first and kept (gpt-fast keeps a cache that is large enough), so both
lengths replay the same compiled graph: the steps attend over the cache of PROMPT + LONG positions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint_path", type=Path, required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--new", type=int, required=True)
    p.add_argument("--long", type=int, required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    sys.path.insert(0, str(Path.cwd()))
    import generate as g  # gpt-fast's, from its folder
    import torch

    model = g._load_model(a.checkpoint_path, a.device, torch.bfloat16, False)
    torch.manual_seed(1234)
    encoded = torch.randint(0, 1024, (a.prompt,), device=a.device, dtype=torch.int64)  # main()'s synthetic prompt
    if a.compile:
        g.decode_one_token = torch.compile(g.decode_one_token, mode="reduce-overhead", fullgraph=True)

    def timed(new: int) -> float:
        g.device_sync(device=a.device)
        t0 = time.perf_counter()
        g.generate(model, encoded, new, batch_size=1, draft_model=None, speculate_k=5, interactive=False,
                   callback=lambda x: x, temperature=0.8, top_k=200)  # fmt: skip
        g.device_sync(device=a.device)
        return time.perf_counter() - t0

    for n in (a.long, a.new, a.long, a.new):  # compilation and CUDA-graph recording, at the longer cache first
        timed(n)
    new, long = [], []
    for _ in range(a.rounds):
        new.append(timed(a.new))
        long.append(timed(a.long))
    step = (statistics.median(long) - statistics.median(new)) / (a.long - a.new)
    print(json.dumps({"new": new, "long": long, "step_s": step}))


if __name__ == "__main__":
    main()
