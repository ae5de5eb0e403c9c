"""What one Snakemake invocation decides about the machine: backend, device name, tool versions.

They shape the DAG (which rules exist), file names (``results/preflight/<device>.json``) and the
params that rerun jobs, so every job must see the same answer wherever it runs. On a cluster the
Slurm executor re-reads the Snakefile on each compute node: a login node without a GPU and a GPU node
would decide differently. The first reading decides and puts the facts in the environment; Slurm's
``sbatch --export=ALL`` (what the executor submits with) carries them to every job, which reuses them.
The host probes (nvidia-smi, ``nsys/ncu --version``) therefore run once per invocation.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from nsightflow.capture.launch.backend import device_label, gpus, resolve, slug, tool_versions

ENV = "NSIGHTFLOW_HOST_FACTS"
# The thread-count variables Snakemake sets in every job to the job's `threads` (1 unless a rule says more): a
# profiled program gets the user's own values back (nsightflow.capture.launch.tools), so it runs as it runs alone.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


@dataclass(frozen=True)
class HostFacts:
    """The invocation's decisions, with where and from what they were made."""

    backend: Literal["nsight", "torch", "captures"]
    reason: str  # why that backend, in words
    device: str  # folder-safe device name (preflight results are cached under it)
    gpu_jobs: bool  # whether profiling jobs need a GPU (what they request from a scheduler)
    versions: dict[str, Any] = field(default_factory=dict)
    decided_on: str = ""  # host name of the machine that decided
    request: dict[str, Any] = field(default_factory=dict)  # the config values the decision was made from
    # the user's thread-count variables where the invocation started (None: unset)
    user_threads: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def request_of(config: dict[str, Any]) -> dict[str, Any]:
    """The config values the facts depend on: a job whose config differs from these must not reuse them."""
    tools = config["tools"]
    return {
        "profiler": config["profiler"],
        "captures": config.get("captures"),
        "device": config.get("device"),
        "nsys": tools["nsys"],
        "ncu": tools["ncu"],
    }


def decide(config: dict[str, Any]) -> HostFacts:
    """Probe this host and decide (config ``profiler``, ``device``, ``tools``, ``captures``)."""
    req = request_of(config)
    local_gpus = [] if req["captures"] else gpus()
    backend, reason = resolve(req["profiler"], req["nsys"], req["ncu"], req["captures"], local_gpus)
    if backend == "captures":
        device = "none"
    elif req["device"]:
        device = slug(req["device"])
    else:
        device = device_label(backend, local_gpus)
    gpu_jobs = backend == "nsight" or (backend == "torch" and (bool(local_gpus) or bool(req["device"])))
    return HostFacts(
        backend=backend,
        reason=reason,
        device=device,
        gpu_jobs=gpu_jobs,
        versions=tool_versions(backend, req["nsys"], req["ncu"]),
        decided_on=platform.node(),
        request=req,
        user_threads={k: os.environ.get(k) for k in THREAD_VARS},
    )


def shared(config: dict[str, Any], environ: os._Environ[str] | dict[str, Any] = os.environ) -> HostFacts:
    """The facts of this invocation: those in ``environ`` when a submitting host decided them for the
    same config, else decided here and put into ``environ`` for the jobs this process starts."""
    text = environ.get(ENV)
    if text:
        try:
            facts = HostFacts(**json.loads(text))
        except (TypeError, ValueError):
            facts = None
        if facts is not None and facts.request == request_of(config):
            return facts
    facts = decide(config)
    environ[ENV] = facts.to_json()
    return facts


def as_the_user_set(env: dict[str, Any], environ: os._Environ[str] | dict[str, Any] = os.environ) -> dict[str, Any]:
    """``env`` with the thread-count variables as the user had them where the invocation started (``environ`` holds
    the invocation's facts; without them, ``env`` as it is): a job's ``threads`` must not change the program."""
    text = environ.get(ENV)
    if not text:
        return env
    try:
        user = HostFacts(**json.loads(text)).user_threads
    except (TypeError, ValueError):
        return env
    out = dict(env)
    for name, value in user.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out
