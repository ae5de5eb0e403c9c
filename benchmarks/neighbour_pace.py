"""Does a sleeping neighbour change a program's own pace? The timed run of a command runs beside the gated nsys launch,
whose hook polls a file every 5 ms; on the GPU host the timed runs were faster than the program alone (the 1B serving
loop +8.3%, gpt-fast eager's samples about 30%). This runs a command in turns alone and beside a process that sleeps
``--poll-ms`` in a loop, and prints the program's own numbers each time: its ``nsightflow-metrics`` tokens_per_s, or the
numbers a ``--pattern`` regex's first group finds in its output (their median).

    python3 benchmarks/neighbour_pace.py --runs 3 -- python3 -m nsightflow.workloads.serving --device cuda ...
    python3 benchmarks/neighbour_pace.py --pattern "Time for inference \\d+: [\\d.]+ sec total, ([\\d.]+) tokens/sec" \\
        --cwd .corpus/gpt-fast -- python3 generate.py --checkpoint_path ... --max_new_tokens 200 --device cuda
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

from nsightflow.capture.read.own_metrics import own_metrics

POLLER = "import sys, time\nwhile True: time.sleep(float(sys.argv[1]))"


def own_number(output: str, pattern: str | None) -> float:
    """The program's own figure of one run: the median of the pattern's matches, or its metrics' tokens_per_s."""
    if pattern:
        found = [float(m.group(1)) for m in re.finditer(pattern, output)]
        return statistics.median(found) if found else float("nan")
    return float(own_metrics(output).get("tokens_per_s", float("nan")))


def one_run(argv: list[str], cwd: str | None, poll_s: float | None, pattern: str | None) -> tuple[float, float]:
    """The program's own figure and its wall seconds, alone (poll_s None) or beside a sleeping poller."""
    poller = subprocess.Popen([sys.executable, "-c", POLLER, str(poll_s)]) if poll_s else None
    try:
        began = time.monotonic()
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True)
        return own_number(out.stdout, pattern), time.monotonic() - began
    finally:
        if poller is not None:
            poller.kill()
            poller.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="pairs of runs (alone, then beside the poller)")
    ap.add_argument("--poll-ms", type=float, default=5.0)
    ap.add_argument("--pattern", help="a regex whose first group is the program's own figure")
    ap.add_argument("--cwd")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    seen: dict[str, list[float]] = {"alone": [], "beside": []}
    for i in range(args.runs):
        for how, poll in (("alone", None), ("beside", args.poll_ms / 1e3)):
            figure, wall = one_run(argv, args.cwd, poll, args.pattern)
            seen[how].append(figure)
            print(f"run {i} {how}: own figure {figure:.4g}, wall {wall:.1f} s", flush=True)
    a, b = statistics.median(seen["alone"]), statistics.median(seen["beside"])
    print(f"median alone {a:.4g}, beside a {args.poll_ms:g} ms poller {b:.4g} ({b / a - 1:+.2%})")


if __name__ == "__main__":
    main()
