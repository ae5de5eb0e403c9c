"""What each layer of a command's profiled launches costs the program's own pace: the command alone; under the hook
timed (what the timed run adds); probed with no profiler (the operator probe and count); under nsys with its steps
mirrored and no probe (what nsys's tracing adds); under nsys probed (the timeline job's launch); and under ncu with
a plan of one window, one operator of the last step (the program runs to its end under ncu, which profiles nothing
or a launch or two: what ncu adds to launches it never profiles), the same without ``--nvtx`` (``ncu-no-nvtx``: what
ncu's NVTX tracking adds to them); with ``--plan`` (a capture plan of this program: a workflow's
``results/<run>/plan.json``), under ncu profiling that plan's launches with and without ``--nvtx`` (``ncu-plan``,
``ncu-plan-no-nvtx``: what a profiled launch costs, and the part of it ncu's NVTX stacks take); and the timed run as
the timeline job runs it, beside the probed launch gated until it ends, under nsys (``beside-nsys``) or not
(``beside``): what that neighbour does to the timed run. Each line: the program's own figure (its
``nsightflow-metrics`` tokens_per_s, tpot_ms_p50, ttft_ms_p50) and the launch's wall seconds, in rounds; a timed
run's line also its first three steps: when each began after the hook's install, and its wall.

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

from nsightflow import ncu_metrics
from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.launch import ncu, nsys
from nsightflow.capture.launch.command import _run, _timed, timed_beside
from nsightflow.capture.launch.command_call import CommandCall
from nsightflow.capture.launch.tools import run_tool
from nsightflow.capture.read.own_metrics import own_metrics


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


def ncu_argv(
    ncu_bin: str,
    out: str,
    nvtx: bool = True,
    metrics: list[str] | None = None,
    replay_mode: ncu.ReplayMode = "kernel",
    cache_control: ncu.CacheControl = "all",
) -> list[str]:
    """The capture's ncu prefix (its bf16 metrics unless others are given, kernel replay, caches flushed, unless told
    otherwise), with or without ``--nvtx``."""
    metrics = metrics or ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    argv = ncu.capture_argv(
        ncu_bin, out, [], metrics=metrics, replay_mode=replay_mode, clock_control="none", cache_control=cache_control,
        comm_filter=False,
    )  # fmt: skip
    return argv if nvtx else [a for a in argv if a != "--nvtx"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--step-function", action="append", default=[], help="STAGE=module:qualname")
    ap.add_argument("--step-input", action="append", default=[], help="STAGE=module:qualname (timed run only)")
    ap.add_argument(
        "--only",
        help="comma-separated layers (probe,nsys,nsys+probe,ncu,ncu-no-nvtx,ncu-plan,ncu-plan-no-nvtx,"
        "ncu-plan-time,ncu-plan-no-caches,ncu-plan-no-peaks,ncu-plan-app,ncu-plan-no-flush,beside,beside-nsys)",
    )
    ap.add_argument(
        "--ncu-metrics",
        action="append",
        default=[],
        help="NAME=metric,... : one more layer, ncu-plan-NAME, the plan profiled with those metrics",
    )
    ap.add_argument("--plan", type=Path, help="a capture plan of this program (plan.json) for the ncu-plan layers")
    ap.add_argument("--keep", type=Path, help="copy each ncu layer's report (.ncu-rep) into this folder")
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
        # one window of one operator in the last step (the plan's, else the last the timed run saw): the program
        # runs to its end under ncu, which profiles nothing or a launch or two of it
        stage = next(iter(found.stages or []), "")
        last = len(found.every_wall.get(stage, [])) - 1
        if args.plan is not None:
            w = json.loads(args.plan.read_text())["windows"][-1]
            stage, last = w["stage"], w["step"]
        plan.write_text(json.dumps({"windows": [{"stage": stage, "step": last, "units": [0]}]}))
        layers = {
            "probe": (replace(base, flops_out=f"{tmp}/f.json"), []),
            "nsys": (replace(base, mode="ranged"), nsys.profile_argv(nsys_bin, f"{tmp}/n1", [])),
            "nsys+probe": (replace(base, flops_out=f"{tmp}/f2.json"), nsys.profile_argv(nsys_bin, f"{tmp}/n2", [])),
            "ncu": (replace(base, mode="ncu", windows=str(plan)), ncu_argv(ncu_bin, f"{tmp}/c")),
            "ncu-no-nvtx": (replace(base, mode="ncu", windows=str(plan)), ncu_argv(ncu_bin, f"{tmp}/c0", nvtx=False)),
        }
        if args.plan is not None:
            planned = str(args.plan.resolve())
            layers["ncu-plan"] = (replace(base, mode="ncu", windows=planned), ncu_argv(ncu_bin, f"{tmp}/p"))
            layers["ncu-plan-no-nvtx"] = (
                replace(base, mode="ncu", windows=planned),
                ncu_argv(ncu_bin, f"{tmp}/p0", nvtx=False),
            )
            # the plan profiled by application replay (one pass: the program is run once, as by kernel replay), and by
            # kernel replay with the caches left as they are: what each does to a profiled launch's cost
            layers["ncu-plan-app"] = (
                replace(base, mode="ncu", windows=planned),
                ncu_argv(ncu_bin, f"{tmp}/pa", replay_mode="application"),
            )
            layers["ncu-plan-no-flush"] = (
                replace(base, mode="ncu", windows=planned),
                ncu_argv(ncu_bin, f"{tmp}/pn", cache_control="none"),
            )
            full = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
            variants = {
                "ncu-plan-time": ["gpu__time_duration.sum"],
                "ncu-plan-no-caches": [m for m in full if not m.startswith(("lts__", "l1tex__"))],
                "ncu-plan-no-peaks": [m for m in full if not m.endswith(".peak_sustained")],
            }
            for spec in args.ncu_metrics:  # NAME=metric,metric: the plan profiled with those metrics only
                name, _, listed = spec.partition("=")
                variants[f"ncu-plan-{name}"] = listed.split(",")
            for name, metrics in variants.items():
                settings = replace(base, mode="ncu", windows=planned)
                layers[name] = (settings, ncu_argv(ncu_bin, f"{tmp}/{name}", True, metrics))
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
            elif name.startswith("ncu"):  # the hook ends the program after the plan's last window: no record
                launch = call.launch(settings, Path(settings.out).parent)
                said, _ = run_tool(wrap + launch.argv, log, None, gpu=True, env=launch.env, cwd=launch.cwd)
                runs = [{"output": said}]
            else:
                runs = _run(call, settings, log, None, wrap)
            said = runs[0]["output"]
            profiled = f"  {ncu.profiled_count(said)} profiled" if name.startswith("ncu") else ""
            print(f"round {r} {name:11s} {_figures(said)}  {time.monotonic() - began:6.1f} s{profiled}", flush=True)
            if args.keep is not None and name.startswith("ncu"):
                args.keep.mkdir(parents=True, exist_ok=True)
                for rep in Path(tmp).glob(f"{Path(wrap[wrap.index('--export') + 1]).name}.ncu-rep"):
                    shutil.copy2(rep, args.keep / f"r{r}-{name}.ncu-rep")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
