"""gpt-fast's own time per decode step, in one process with nothing of nsightflow in it: its ``generate()`` called as
its ``main()`` calls it (the model loaded, ``decode_one_token`` compiled as ``--compile`` compiles it, the call timed
between two device synchronisations), for NEW and LONG new tokens in turns, so that the two lengths share the
process's pace; the difference of their median times over the LONG - NEW extra steps is a decode step (set-up,
prefill and copies, the same at both lengths, cancel). Run in gpt-fast's folder (pytorch-labs/gpt-fast, BSD-3-Clause:
tests/test_corpus.py's corpus); prints one JSON line ``{"new": [s...], "long": [s...], "step_s": s}``.

The KV cache is set up at the longer length first and kept (gpt-fast keeps a cache that is large enough), so both
lengths replay the same compiled graph: the steps attend over the cache of PROMPT + LONG positions.

With ``--hook``, nsightflow's hook in its timed mode (what a command's timed run has: nsightflow.capture.inside.hook)
follows the ranges of generate.py in every other round, and lets them pass untouched in the others, in turns: in one
process, whose pace both share, gpt-fast's own time per decode step without and with the hook (what the hook costs
the program), and nsightflow's steady decode pace from the hook's record, found as a command's timed run finds it
(nsightflow.capture.launch.discovery): ``"hooked": {"new", "long", "step_s", "pace_s"}`` beside the plain numbers.
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
    p.add_argument("--hook", type=Path, help="the hook's record, written at exit")
    a = p.parse_args()
    tracker = None
    if a.hook:
        from nsightflow.capture.inside.hook import install
        from nsightflow.capture.inside.hook_settings import HookSettings

        tracker = install(HookSettings("timed", str(a.hook)))
        assert tracker is not None
        if tracker.auto is not None:  # generate.py's own ranges are the stages (a timed run drops these at its first)
            tracker.auto.remove()
            tracker.auto = None
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

    def follow(on: bool) -> None:
        if tracker is not None:
            tracker.inside = not on  # the hook's own flag: its wrappers pass the ranges to NVTX untouched

    follow(False)
    for n in (a.long, a.new, a.long, a.new):  # compilation and CUDA-graph recording, at the longer cache first
        timed(n)
    times: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    for r in range(a.rounds):
        for hooked in ((False, True) if r % 2 == 0 else (True, False)) if tracker is not None else (False,):
            follow(hooked)
            times[hooked][0].append(timed(a.new))
            times[hooked][1].append(timed(a.long))
    follow(False)
    out: dict[str, object] = {"new": times[False][0], "long": times[False][1], "step_s": per_step(*times[False], a)}
    if tracker is not None:
        from nsightflow.capture.launch.discovery import discover

        found = discover(tracker.record(), "LLM", None)  # its stages prefill and decode, as the workflow finds them
        skip = found.skip.get("decode", ())
        paces = [x for i, x in enumerate(found.every_pace["decode"]) if x is not None and i not in skip]
        new, long = times[True]
        out["hooked"] = {"new": new, "long": long, "step_s": per_step(new, long, a), "pace_s": statistics.median(paces)}
    print(json.dumps(out))


def per_step(new: list[float], long: list[float], a: argparse.Namespace) -> float:
    """A decode step: the difference of the median times at the two lengths over the extra steps."""
    return (statistics.median(long) - statistics.median(new)) / (a.long - a.new)


if __name__ == "__main__":
    main()
