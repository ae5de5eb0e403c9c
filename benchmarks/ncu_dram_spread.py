"""On the GPU host: why a compiled program's sampled DRAM bytes sit below ncu over every launch.

The compiled-command test (tests/test_gpu.py) compares nsightflow's DRAM bytes of two sampled decode steps with ncu
over every launch of the decode ranges, and they differ by up to 1.9% while the tensor FLOPs agree exactly. This runs
the same program (tests/programs/compiled_steps.py, reduce-overhead, 12 steps, hidden 2048, batch 64) under ncu with
the capture's metric list in several ways, and prints each steady step's DRAM bytes per launch position:

- ``every`` (twice): every launch of every decode range, as the test's reference;
- ``steady``: every launch of the steady steps only (the launches of the first steps skipped with ``--launch-skip``);
- ``one``: one steady step alone (the first steady step, then the last), as nsightflow's windows profile them.

If the per-step values of ``every`` move while ``one`` stays at its own value, profiling the earlier launches is what
moves them (the reference perturbs itself); if ``one`` moves as much from run to run, the spread is the counter's.
Usage: ``python3 benchmarks/ncu_dram_spread.py [--out DIR]`` after ``. .gpu-bundle/activate.sh``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from nsightflow.capture.launch import ncu
from nsightflow.capture.read import ncu_csv

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ["tests/programs/compiled_steps.py", "--backend", "inductor", "--mode", "reduce-overhead"]
SHAPE = ["--steps", "12", "--hidden", "2048", "--batch", "64"]
METRICS = (
    "gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__cycles_elapsed.avg.per_second,"
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,"
    "l1tex__t_bytes.sum"
).split(",")
PER_STEP = 5  # launches in a steady step (copy-in, GEMM, relu, split-K GEMM, split-K reduce)
STEADY = 9  # steps 3..11


def capture(out: Path, name: str, extra: list[str]) -> pd.DataFrame:
    base = out / name
    argv = ncu.reference_argv(shutil.which("ncu") or "ncu", base, "LLM", ["decode"], METRICS, [sys.executable])
    at = argv.index(sys.executable)
    argv = argv[:at] + extra + argv[at:] + PROGRAM + SHAPE
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    text = subprocess.run(ncu_csv.export_argv("ncu", f"{base}.ncu-rep"), capture_output=True, text=True, check=True)
    frame, _ = ncu_csv.parse_raw_csv(text.stdout)
    return frame


def per_position(frame: pd.DataFrame, steps: int) -> list[list[float]]:
    """DRAM MB (read + write) of the last ``steps`` steps, one row per step, one column per launch position."""
    tail = frame.iloc[len(frame) - steps * PER_STEP :]
    mb = ((tail["dram__bytes_read.sum"] + tail["dram__bytes_write.sum"]) / 1e6).round(3).tolist()
    return [mb[i * PER_STEP : (i + 1) * PER_STEP] for i in range(steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="folder for the reports (a temporary one by default)")
    out = parser.parse_args().out or Path(tempfile.mkdtemp(prefix="dram-spread-"))
    out.mkdir(parents=True, exist_ok=True)
    # The first run compiles (its first step launches inductor's benchmark kernels too); the later ones find
    # inductor's cache warm and launch fewer kernels before the steady steps: counted from the second run.
    runs = {"every": per_position(capture(out, "every", []), STEADY)}
    every = capture(out, "every2", [])
    runs["every again"] = per_position(every, STEADY)
    before = len(every) - STEADY * PER_STEP
    print(f"every (warm cache): {len(every)} launches, {before} before the steady steps", flush=True)
    runs["steady"] = per_position(capture(out, "steady", ["--launch-skip", str(before)]), STEADY)
    first = ["--launch-skip", str(before), "--launch-count", str(PER_STEP)]
    last = ["--launch-skip", str(len(every) - PER_STEP), "--launch-count", str(PER_STEP)]
    runs["one (first steady)"] = per_position(capture(out, "first", first), 1)
    runs["one (last steady)"] = per_position(capture(out, "last", last), 1)
    runs["one (first steady) again"] = per_position(capture(out, "first2", first), 1)
    names = every["Kernel Name"].iloc[-PER_STEP:].str[:28].tolist()
    print(f"DRAM MB per launch position: {names}")
    for name, rows in runs.items():
        gemms = [r[1] + r[3] for r in rows]
        print(f"{name}: GEMMs per step {gemms}; mean {sum(gemms) / len(gemms):.3f}")
        for i, r in enumerate(rows):
            print(f"  {f'step {3 + i}' if len(rows) > 1 else 'its step'}: {r}")


if __name__ == "__main__":
    main()
