"""Sweep points from the config: each workload's ``sweep`` lists expand into runs with readable, stable ids."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from nsightflow.errors import ConfigError
from nsightflow.files import safe_name

# A run id's folder names: file systems take 255 bytes a name, and files inside are named from them plus suffixes.
MAX_PART = 200


def _token(value: object) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return safe_name(text, "x")


def run_id(name: str, point: dict[str, Any]) -> str:
    """``name/key~value/...`` in the sweep's key order: readable, stable, one folder level per swept key."""
    return "/".join([name] + [f"{k}~{_token(v)}" for k, v in point.items()])


def points(sweep: dict[str, Any], mode: str = "product") -> list[dict[str, Any]]:
    """Sweep points: the cartesian product of the value lists, or (``zip``) their element-wise pairing."""
    if not sweep:
        return [{}]
    keys = list(sweep)
    lists = [v if isinstance(v, list) else [v] for v in sweep.values()]
    if mode == "zip":
        lengths = {len(v) for v in lists}
        if len(lengths) != 1:
            raise ConfigError(
                f"sweep_mode zip needs lists of one length; got {dict(zip(keys, map(len, lists), strict=True))}"
            )
        combos: Iterable[tuple[Any, ...]] = zip(*lists, strict=True)
    elif mode == "product":
        combos = itertools.product(*lists)
    else:
        raise ConfigError(f"sweep_mode {mode!r}: use 'product' or 'zip'")
    return [dict(zip(keys, c, strict=True)) for c in combos]


# A command's settings (a callable given any of them is refused: nsightflow.rules.config).
COMMAND_ONLY = (
    "env",
    "cwd",
    "domain",
    "stages",
    "rank",
    "gpus",
    "warmup_steps",
    "step_functions",
    "window",
    "step_inputs",
)
# What a run keeps of its workload besides its name and arguments: the callable, or the command and its settings.
PROGRAM_KEYS = ("callable", "command", "nprocs", "code_version", *COMMAND_ONLY)


def expand(workloads: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """run id → {name, callable or command (and its env, cwd, domain, stages), args (base args updated with the
    point), point}; ids must be unique."""
    runs: dict[str, dict[str, Any]] = {}
    for w in workloads:
        for point in points(w.get("sweep") or {}, w.get("sweep_mode", "product")):
            rid = run_id(w["name"], point)
            long = [part for part in rid.split("/") if len(part.encode()) > MAX_PART]
            if long:
                raise ConfigError(
                    f"workload {w['name']!r}, sweep point {point}: the run id's folder name {long[0][:60]!r}... is "
                    f"{len(long[0].encode())} bytes, over the {MAX_PART} a file system takes with nsightflow's "
                    "suffixes; shorten the workload's name or the swept value"
                )
            if any(part in ("", ".", "..") for part in rid.split("/")) or ".." in w["name"]:
                raise ConfigError(
                    f"workload {w['name']!r}, sweep point {point}: run id {rid!r} would name a folder "
                    "outside results/; use names of letters, digits, _ . - not starting with a dot"
                )
            if rid in runs:
                raise ConfigError(
                    f"two sweep points share the run id {rid!r}: give the workloads distinct names "
                    "or make the swept values distinct"
                )
            program = {k: w[k] for k in PROGRAM_KEYS if k in w}
            runs[rid] = {"name": w["name"], **program, "args": {**(w.get("args") or {}), **point}, "point": point}
    return runs


# Jobs one run makes, by backend (the profile, the capture with its plan, the aggregation, the run's page; see
# workflow/rules).
JOBS_PER_RUN = {"nsight": 4, "torch": 3, "captures": 3}


def size_warning(runs: int, backend: str, limit: int) -> str | None:
    """A line for the terminal when a config's sweeps make more than ``limit`` runs (config ``sweep_warn``): a
    thousand-point sweep quietly became 3,001 jobs."""
    if runs <= limit:
        return None
    jobs = runs * JOBS_PER_RUN.get(backend, 3) + 1 + 2 * (backend == "nsight")  # the index, the device's two checks
    return (
        f"nsightflow: the config's sweeps make {runs:,} runs, about {jobs:,} jobs on the {backend} backend (more "
        f"than sweep_warn: {limit}); each run profiles its program. Narrow the sweep, or raise sweep_warn to "
        "silence this."
    )
