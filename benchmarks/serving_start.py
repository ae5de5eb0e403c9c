"""Where a launch of the serving loop spends the time outside its iterations: the program stamps its phases (its first
line, ``torch`` imported, the first CUDA initialisation, the model built, the engine's first and last iteration, its
teardown, ``main`` returned, the last exit handler) on the wall clock, and the parent stamps the spawn, each line of
nsys's own output and the process's end. Arms ``alone`` (the program as a user runs it) and ``nsys`` (under the
timeline job's ``nsys profile`` argv, nsightflow.capture.launch.nsys; no hook), in turns.

What it answers: how much of a gated launch's start comes after the program's first line but before it touches the
GPU (the imports a gate at the first CUDA initialisation would overlap with the timed run), and how the seconds after
the last iteration split between the engine's teardown, the interpreter's exit and nsys's end.

Usage (GPU host, project root, after ``. .gpu-bundle/activate.sh``; one run of the loop first fills the JIT cache):
``python3 benchmarks/serving_start.py --rounds 2 -- --config '<model JSON>' --dtype bfloat16 --device cuda ...``
"""

from __future__ import annotations

import argparse
import atexit
import functools
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

STAMP = "nsightflow-stamp: "
STEP = "transformers.generation.continuous_batching.continuous_api:ContinuousBatchProcessor._generation_step"
ORDER = ["spawn", "start", "torch", "cuda_init", "cuda_ready", "model", "first_step", "last_step", "serve_end",
         "main_end", "exit_handlers", "nsys_collecting", "ended"]  # fmt: skip


def _stamp(name: str) -> None:
    sys.stdout.write(f"{STAMP}{name} {time.time():.6f}\n")
    sys.stdout.flush()


def _stamp_after(owner: Any, name: str, stamp: str) -> None:
    """``owner.name`` stamped ``stamp`` each time it returns."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def stamped(*a: Any, **k: Any) -> Any:
        out = fn(*a, **k)
        _stamp(stamp)
        return out

    setattr(owner, name, stamped)


def program(args: list[str]) -> None:
    """The serving workload, its phases stamped."""
    _stamp("start")
    atexit.register(_stamp, "exit_handlers")  # registered first: runs last of the exit handlers
    import torch

    _stamp("torch")
    lazy = torch.cuda._lazy_init

    def stamped_init() -> None:
        if not torch.cuda.is_initialized():
            _stamp("cuda_init")
            lazy()
            _stamp("cuda_ready")
        else:
            lazy()

    torch.cuda._lazy_init = stamped_init  # looked up on the module by torch's C++ lazy init
    from nsightflow.workloads import hf, serving

    _stamp_after(hf, "load_model", "model")
    module, qualname = STEP.split(":")
    owner, name = qualname.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), owner)
    step = getattr(cls, name)
    seen = [0]

    @functools.wraps(step)
    def stamped_step(*a: Any, **k: Any) -> Any:
        if not seen[0]:
            _stamp("first_step")
        seen[0] += 1
        try:
            return step(*a, **k)
        finally:
            _stamp("last_step")  # each one: the last line of its kind is the last iteration's end

    setattr(cls, name, stamped_step)
    _stamp_after(serving, "serve", "serve_end")
    serving.main(args)
    _stamp("main_end")


def launch(argv: list[str]) -> dict[str, float]:
    """Run ``argv``; the last time each stamp (and each of nsys's lines of interest) appeared, epoch seconds."""
    seen: dict[str, float] = {"spawn": time.time()}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.time()
            if line.startswith(STAMP):
                name, at = line[len(STAMP) :].split()
                seen[name] = float(at)
            elif "Collecting data" in line:
                seen["nsys_collecting"] = now
    seen["ended"] = time.time()
    if proc.returncode:
        raise SystemExit(f"{argv[:3]} ended with {proc.returncode}")
    return seen


def _row(arm: str, seen: dict[str, float]) -> str:
    names = [n for n in ORDER if n in seen]
    parts = [f"{b} +{seen[b] - seen[a]:.2f}" for a, b in zip(names, names[1:], strict=False)]
    return f"{arm:5s} {seen['ended'] - seen['spawn']:6.2f} s: " + ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--program", action="store_true", help="run as the stamped serving program (internal)")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    if a.program:
        program(args)
        return
    from nsightflow.capture.launch.nsys import profile_argv

    argv = [sys.executable, os.path.abspath(__file__), "--program", "--", *args]
    out = tempfile.mkdtemp(prefix="serving-start-")
    arms = {
        "alone": lambda i: argv,
        "nsys": lambda i: profile_argv(shutil.which("nsys") or "nsys", f"{out}/t{i}", argv),
    }
    print("each launch: seconds in all, then each stamp's seconds after the one before", flush=True)
    for r in range(a.rounds):
        for arm in ("alone", "nsys") if r % 2 == 0 else ("nsys", "alone"):
            print(_row(arm, launch(arms[arm](r))), flush=True)


if __name__ == "__main__":
    main()
