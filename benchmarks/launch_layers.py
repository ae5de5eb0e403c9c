"""What each layer of a command's profiled launches costs the program's own pace: the command alone; under the hook
timed (what the timed run adds); probed with no profiler (the operator probe and count); under nsys with its steps
mirrored and no probe (what nsys's tracing adds); under nsys probed (the timeline job's launch); and under ncu with
the hook's windows from an empty plan (what ncu adds to launches it never profiles); and the timed run as the timeline
job runs it, beside the probed launch gated until it ends, under nsys (``beside-nsys``) or not (``beside``): what
that neighbour does to the timed run. Each line: the program's own figure (its ``nsightflow-metrics`` tokens_per_s,
tpot_ms_p50, ttft_ms_p50) and the launch's wall seconds, in rounds; a timed run's line also its first three
steps: when each began after the hook's install, and its wall.

    python3 benchmarks/launch_layers.py --rounds 1 -- python3 -m nsightflow.workloads.serving --device cuda ...
    --step-function iteration=MODULE:QUALNAME   (a loop without ranges: its steps, as config step_functions)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.launch import ncu, nsys
from nsightflow.capture.launch.command import CommandCall, _run, _timed, timed_beside
from nsightflow.capture.read.own_metrics import own_metrics
from nsightflow.ncu_metrics import DEFAULT_METRICS


def _figures(output: str) -> str:
    said = own_metrics(output)
    nan = float("nan")
    tpot, ttft = said.get("tpot_ms_p50", nan), said.get("ttft_ms_p50", nan)
    return f"tokens/s {said.get('tokens_per_s', nan):8.1f}  tpot p50 {tpot:7.2f} ms  ttft p50 {ttft:8.1f} ms"


def _first_steps(record: dict) -> str:
    """A hooked run's first steps: when each began (s after the hook's install) and its wall (ms), where a late first
    token shows whether the time went before the first step or into it."""
    ranges = sorted((r for r in record.get("ranges") or [] if r[2] == 0), key=lambda r: r[4])[:3]
    began = record.get("started_ns")
    if not ranges:
        return ""
    t0 = began if began is not None else ranges[0][4]
    return "  first steps " + ", ".join(f"{(r[4] - t0) / 1e9:.2f} s +{(r[5] - r[4]) / 1e6:.0f} ms" for r in ranges)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--step-function", action="append", default=[], help="STAGE=module:qualname")
    ap.add_argument("--step-input", action="append", default=[], help="STAGE=module:qualname (timed run only)")
    ap.add_argument("--only", help="comma-separated layers (probe,nsys,nsys+probe,ncu,beside,beside-nsys)")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    functions = dict(s.split("=", 1) for s in args.step_function)
    inputs = dict(s.split("=", 1) for s in args.step_input)
    call = CommandCall(argv, step_functions=functions, step_inputs=inputs, warmup_steps=0)
    only = set(args.only.split(",")) if args.only else None
    nsys_bin, ncu_bin = shutil.which("nsys") or "nsys", shutil.which("ncu") or "ncu"
    for r in range(args.rounds):
        tmp = tempfile.mkdtemp(prefix="layers-")
        log = f"{tmp}/log"
        began = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        print(f"round {r} alone       {_figures(out)}  {time.monotonic() - began:6.1f} s", flush=True)
        began = time.monotonic()
        Path(f"{tmp}/t").mkdir()
        found, timed = _timed(call, f"{tmp}/t", log, None)
        print(
            f"round {r} timed       {_figures(timed[0]['output'])}  {time.monotonic() - began:6.1f} s"
            + _first_steps(timed[0]),
            flush=True,
        )
        base = HookSettings("probe", None, found.domain, found.stages, call.mirror, skip=found.skip)
        plan = Path(tmp) / "plan.json"
        plan.write_text(json.dumps({"windows": []}))
        layers = {
            "probe": (replace(base, flops_out=f"{tmp}/f.json"), []),
            "nsys": (replace(base, mode="ranged"), nsys.profile_argv(nsys_bin, f"{tmp}/n1", [])),
            "nsys+probe": (replace(base, flops_out=f"{tmp}/f2.json"), nsys.profile_argv(nsys_bin, f"{tmp}/n2", [])),
            "ncu": (
                replace(base, mode="ncu", windows=str(plan)),
                ncu.capture_argv(
                    ncu_bin,
                    f"{tmp}/c",
                    [],
                    metrics=list(DEFAULT_METRICS),
                    replay_mode="kernel",
                    clock_control="none",
                    cache_control="all",
                    comm_filter=False,
                ),
            ),
        }
        layers["beside"] = (replace(base, flops_out=f"{tmp}/f3.json"), [])
        layers["beside-nsys"] = (
            replace(base, flops_out=f"{tmp}/f4.json"),
            nsys.profile_argv(nsys_bin, f"{tmp}/n3", []),
        )
        for i, (name, (settings, wrap)) in enumerate(layers.items()):
            if only is not None and name not in only:
                continue
            Path(f"{tmp}/{i}").mkdir()
            began = time.monotonic()
            settings = replace(settings, out=f"{tmp}/{i}/rec.json")
            if name.startswith("beside"):
                _, timed, runs = timed_beside(call, f"{tmp}/{i}", log, None, settings, wrap)
                print(f"round {r} {name:11s} timed {_figures(timed[0]['output'])}" + _first_steps(timed[0]), flush=True)
            else:
                runs = _run(call, settings, log, None, wrap)
            print(f"round {r} {name:11s} {_figures(runs[0]['output'])}  {time.monotonic() - began:6.1f} s", flush=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
