"""Run a Python module with its threads' stacks sampled every few milliseconds around a function's first calls, to
see where a one-time cost goes (for example a serving loop's first iteration, slow in one setting and not another).

``python sampled.py OUT FUNCTION -m module args...``: from the first sample in which any thread runs ``FUNCTION`` (a
code object's name, such as ``_generation_step``) and for WINDOW_S seconds after (4; environment SAMPLED_WINDOW_S),
every sample's stacks (thread name and frames, innermost last) go to ``OUT`` as JSON lines when the program ends:
``{"t": s, "threads": {name: [...]}}``.
A run under nsys (its environment has QUADD_ variables) writes ``OUT.nsys`` instead, so the two launches of a
workflow's timeline job do not overwrite each other. Used by benchmarks/first_token.py ``--stacks``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time

PERIOD_S = 0.002
WINDOW_S = float(os.environ.get("SAMPLED_WINDOW_S", "4"))


def _stacks(frames: dict[int, object], names: dict[int, str], me: int) -> dict[str, list[str]]:
    out = {}
    for ident, frame in frames.items():
        if ident == me:
            continue
        stack = []
        f = frame
        while f is not None:
            code = f.f_code  # type: ignore[attr-defined]
            stack.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{f.f_lineno}")  # type: ignore[attr-defined]
            f = f.f_back  # type: ignore[attr-defined]
        out[names.get(ident, str(ident))] = stack[::-1]
    return out


def main() -> None:
    out, function = sys.argv[1], sys.argv[2]
    assert sys.argv[3] == "-m", "usage: sampled.py OUT FUNCTION -m module args..."
    module = sys.argv[4]
    if any(k.startswith("QUADD") for k in os.environ):
        out += ".nsys"
    rows: list[dict[str, object]] = []
    stop = threading.Event()

    def sample() -> None:
        me = threading.get_ident()
        began = None
        while not stop.is_set():
            names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
            stacks = _stacks(sys._current_frames(), names, me)
            now = time.perf_counter()
            if began is None and any(function in fr for s in stacks.values() for fr in s):
                began = now
            if began is not None:
                if now - began > WINDOW_S:
                    return
                rows.append({"t": round(now - began, 4), "threads": stacks})
            time.sleep(PERIOD_S)

    def write() -> None:
        stop.set()
        with open(out, "w") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")

    atexit.register(write)
    threading.Thread(target=sample, daemon=True, name="sampler").start()
    sys.argv = [module, *sys.argv[5:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
