"""A callable's workload run as a program of its own, so that it can run as several processes (config ``nprocs``).

``python -m nsightflow.capture.inside.runner --callable pkg.mod:build`` builds the workload (its arguments as JSON in
:data:`ARGS_ENV`), runs the warm-up passes, then every stage step once inside an NVTX range of :data:`DOMAIN` (named
after the stage, its step as payload), synchronized before the range ends: a program with NVTX ranges of its own,
which nsightflow profiles as it profiles any command's (nsightflow.capture.inside.hook: discovery, probe, count,
windows).

:func:`command_fields` is the command a workload with ``nprocs: N`` becomes: the runner under torchrun
(``python -m torch.distributed.run --standalone --nproc_per_node N``), which gives each process ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; the callable reads them (or calls
``torch.distributed.init_process_group()``, which does) to build its rank's part of the job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from nsightflow.workloads.api import WorkloadError, build_workload

DOMAIN = "nsightflow.callable"  # the runner's stage ranges (not one of nsightflow.domains' own: those are mirrors)
ARGS_ENV = "NSIGHTFLOW_CALLABLE_ARGS"  # the callable's arguments, JSON (never in argv, where {name} is a placeholder)


def command_fields(
    spec: str,
    args: dict[str, Any],
    nprocs: int,
    warmup: int,
    python: str,
    mirror: str,
    rank: int,
    gpus: int,
    log_dir: str,
) -> dict[str, Any]:
    """The command workload (nsightflow.capture.launch.command_call.CommandCall's fields) that runs ``spec`` as
    ``nprocs`` processes: its stages are the runner's ranges, ``rank`` is the one probed and captured. ``log_dir``:
    torchrun's folder for its per-launch records (an absolute path in the run's results; without it torchrun makes a
    ``torchelastic_*`` folder in the shared temporary folder at every launch and never removes it)."""
    argv = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nprocs)]
    argv += ["--log-dir", log_dir]
    argv += ["-m", "nsightflow.capture.inside.runner", "--callable", spec, "--warmup", str(warmup)]
    return {
        "command": argv,
        "args": {},
        "env": {ARGS_ENV: json.dumps(args, sort_keys=True)},
        "cwd": None,
        "domain": DOMAIN,
        "stages": None,
        "mirror": mirror,
        "dtype": args.get("dtype"),
        "rank": rank,
        "gpus": gpus,
        "warmup_steps": 0,  # the runner's own warm-up passes (``warmup``) run before its ranges: every step is steady
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a callable's workload as a program: warm-up, then ranged steps.")
    parser.add_argument("--callable", dest="spec", required=True, help="package.module:function")
    parser.add_argument("--warmup", type=int, default=1)
    ns = parser.parse_args(argv)
    try:
        args = json.loads(os.environ.get(ARGS_ENV) or "{}")
    except json.JSONDecodeError as exc:
        raise SystemExit(f"nsightflow: {ARGS_ENV} is not a JSON object ({exc})") from exc
    from nsightflow.capture.inside.passes import run_profiled

    try:
        run_profiled(build_workload(ns.spec, args), DOMAIN, ns.warmup)
    except WorkloadError as exc:
        print(f"nsightflow (rank {os.environ.get('RANK', '0')}): {exc}", file=sys.stderr)
        return 2
    _end_process_group()
    return 0


def _end_process_group() -> None:
    """Wait for every rank, then end the process group the callable started: a rank that exits while its peers still
    talk to it, or leaves gloo's group to the interpreter's exit, can be aborted (SIGABRT, seen on 2 CPU cores)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    from nsightflow.capture.inside.runner import (
        main as _main,  # the imported copy (see nsightflow.capture.inside.harness)
    )

    sys.exit(_main())
