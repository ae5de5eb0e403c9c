"""What ncu costs per kernel launch outside its profiler windows (``--profile-from-start off``, nothing profiled), with
and without ``--nvtx``, and with NVTX ranges around the launches: 34,000 launches of a one-element add (the 8B-shaped
decoder's stages launch 34,092), timed inside the program. Usage (on the GPU host, from the project root, after
``. .gpu-bundle/activate.sh``): python3 benchmarks/ncu_launch_costs.py"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

N = 34_000


def program(marks: bool, start_range: bool = False) -> None:
    """The launches, timed: with ``marks``, an NVTX range around every launch (as the probe marks operators); with
    ``start_range``, after ``cudaProfilerStart`` (a profiler told to trace from it traces them)."""
    import nvtx
    import torch

    x = torch.zeros(1, device="cuda")
    for _ in range(2000):  # warm-up
        x.add_(1)
    torch.cuda.synchronize()
    dom = nvtx.get_domain("costs.ops")
    attrs = dom.get_event_attributes(message="add")
    if start_range:
        torch.cuda.profiler.start()
    start = time.perf_counter()
    for i in range(N):
        if marks:
            dom.push_range(attrs, payload=i)
        x.add_(1)
        if marks:
            dom.pop_range()
    torch.cuda.synchronize()
    print(f"RESULT {(time.perf_counter() - start) / N * 1e6:.2f}", flush=True)


def loop_argv(marks: bool = False, start_range: bool = False) -> list[str]:
    """The command line of ``program`` (this file's launch loop), for this and the other launch-cost scripts."""
    return [sys.executable, __file__, "program", "marks" if marks else "plain", *(["start"] if start_range else [])]


def loop_results(stdout: str) -> list[float]:
    """The µs per launch a run of ``loop_argv`` printed (none where it failed)."""
    return [float(ln.split()[1]) for ln in stdout.splitlines() if ln.startswith("RESULT")]


def main() -> None:
    ncu = shutil.which("ncu")
    base = [ncu, "--profile-from-start", "off", "--replay-mode=kernel", "--clock-control=none"] if ncu else []
    rows = [
        ("alone", [], False),
        ("alone, NVTX range per launch", [], True),
        ("ncu, nothing profiled", base, False),
        ("ncu --nvtx, nothing profiled", [*base, "--nvtx"], False),
        ("ncu --nvtx, NVTX range per launch", [*base, "--nvtx"], True),
        ("ncu, NVTX range per launch (no --nvtx)", base, True),
    ]
    for _ in range(2):
        for label, prefix, marks in rows:
            if prefix and not ncu:
                continue
            start = time.time()
            per = loop_results(subprocess.run([*prefix, *loop_argv(marks)], capture_output=True, text=True).stdout)
            shown = f"{per[0]:.2f}" if per else "?"
            print(f"{label:42s} {shown:>7s} µs a launch ({time.time() - start:.1f} s launch)", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["program"]:
        program(sys.argv[2] == "marks", sys.argv[3:] == ["start"])
    else:
        main()
