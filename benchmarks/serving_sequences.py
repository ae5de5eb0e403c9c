"""How a serving loop's launch sequences differ, and what a plan that reused profiled kernels would leave out.

The serving workflow's ncu job profiles one launch per class in one step of every launch sequence (12 in the 1B
loop of tests/test_serving.py, 545 launches, about 30 s of its 63 s). This makes the command's timeline as the
timeline job does (``nsightflow.capture.launch.command.timeline``), plans it as the ncu job would, and prints, per
planned window: its launches, how many run a kernel function an earlier window profiled (any grid), how many one with
the same kernel, grid and block, and how far its step's kernel sequence is from the nearest sequence profiled before
(kernels in neither, by difflib's alignment). With ``--out DIR`` it leaves the timeline's SQLite there, xz-compressed.

    python3 benchmarks/serving_sequences.py --step-function iteration=MODULE:QUALNAME -- python3 -m ...serving ...
"""

from __future__ import annotations

import argparse
import difflib
import lzma
import shutil
import tempfile
from pathlib import Path

from nsightflow.capture.launch import command
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.capture.read.attribution import read_timeline
from nsightflow.capture.read.plan import plan_capture


def analyse(sqlite: Path, domain: str, sample_steps: list[str]) -> None:
    """Print the plan's windows of a timeline, each with what earlier windows profiled of it."""
    tl = read_timeline(sqlite, domain)
    plan = plan_capture(tl, domain, sample_steps, "representatives")
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    for stage, s in plan.stages.items():
        print(f"{stage}: {s.launches} launches, {s.steps} steps, {s.structures} launch sequences; {s.profiled} planned")
    names: set[str] = set()
    configs: set[tuple[str, str, str]] = set()
    before: list[list[str]] = []
    for w in plan.windows:
        mine = [e for e in plan.expected if (e.stage, e.step) == (w.stage, w.step)]
        step = ranged[(ranged["stage"] == w.stage) & (ranged["step"] == w.step)].sort_values("seq")
        seq = step["mangled"].astype(str).tolist()
        apart = min(
            (sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in m.get_opcodes() if op != "equal")
             for m in (difflib.SequenceMatcher(None, b, seq, autojunk=False) for b in before)),
            default=len(seq),
        )  # fmt: skip
        print(
            f"window {w.stage} step {w.step}: {len(mine)} launches planned; kernel seen before "
            f"{sum(e.mangled in names for e in mine)}, kernel, grid and block seen before "
            f"{sum((e.mangled, str(e.grid), str(e.block)) in configs for e in mine)}; its step's {len(seq)} launches "
            f"differ from the nearest earlier window's sequence in {apart}",
            flush=True,
        )
        names |= {e.mangled for e in mine}
        configs |= {(e.mangled, str(e.grid), str(e.block)) for e in mine}
        before.append(seq)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-function", action="append", default=[], help="STAGE=module:qualname")
    ap.add_argument("--sample-steps", default="first,last")
    ap.add_argument("--out", help="a folder for the timeline's SQLite (xz)")
    ap.add_argument("--sqlite", help="analyse this timeline export instead of making one (--domain: its ranges')")
    ap.add_argument("--domain", default="nsightflow")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.sqlite:
        analyse(Path(args.sqlite), args.domain, args.sample_steps.split(","))
        return
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    functions = dict(s.split("=", 1) for s in args.step_function)
    call = CommandCall(argv, step_functions=functions, warmup_steps=0)
    tmp = Path(tempfile.mkdtemp(prefix="sequences-"))
    outputs = ProfileOutputs.of(tmp / "m.json", tmp / "f.json", tmp / "c.json", tmp / "log")
    sqlite = tmp / "t.sqlite"
    nsys_bin = shutil.which("nsys") or "nsys"
    command.timeline(nsys_bin, call, tmp / "t.nsys-rep", sqlite, outputs, RunSettings({}, {}, 900))
    analyse(sqlite, call.mirror, args.sample_steps.split(","))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(sqlite, "rb") as src, lzma.open(Path(args.out) / "serving.sqlite.xz", "wb", preset=3) as dst:
            shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
