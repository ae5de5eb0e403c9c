import re

from snakemake.utils import validate

from nsightflow.backend import device_label, resolve
from nsightflow.sweep import expand as expand_sweep


validate(config, schema="../schemas/config.schema.yaml")

BACKEND, BACKEND_REASON = resolve(
    config["profiler"], config["tools"]["nsys"], config["tools"]["ncu"], config.get("captures")
)
if BACKEND == "captures":
    from nsightflow.captures import captures_run_id

    RUNS = {captures_run_id(config["captures"]): {"name": "captures", "args": {}, "point": {}}}
else:
    RUNS = expand_sweep(config["workloads"])
DEVICE = device_label(BACKEND)


wildcard_constraints:
    run="|".join(re.escape(r) for r in RUNS),
    capture="[A-Za-z0-9_.-]+",
    device="[A-Za-z0-9_.+-]+",
    dtype="[a-z0-9]+",


def run_spec(wildcards):
    return RUNS[wildcards.run]


def workload_dtype(wildcards):
    return str(run_spec(wildcards)["args"].get("dtype", "bfloat16"))


def program(wildcards):
    """argv of the workload under the harness (the program nsys, ncu and torch.profiler launch)."""
    from nsightflow.capture import harness_argv

    spec = run_spec(wildcards)
    return harness_argv(spec["callable"], spec["args"], config["nvtx_domain"], config["warmup"], config["tools"]["python"])


def ceiling_file(wildcards):
    return f"results/ceilings/{DEVICE}/{workload_dtype(wildcards)}.json"


def ncu_metrics():
    from nsightflow.ncu import DEFAULT_METRICS

    base = DEFAULT_METRICS if config["ncu"]["metrics"] == "default" else config["ncu"]["metrics"]
    return list(dict.fromkeys(list(base) + list(config["ncu"]["extra_metrics"])))


def _captures(run):
    """Capture ids the selection checkpoint planned for one run."""
    plans = checkpoints.select_kernels.get(run=run).output.plans
    return sorted(glob_wildcards(f"{plans}/{{capture}}.json").capture)


def plan_files(wildcards):
    return [f"results/{wildcards.run}/plans/{c}.json" for c in _captures(wildcards.run)]


def export_files(wildcards):
    return [f"results/{wildcards.run}/ncu/{c}.raw.csv" for c in _captures(wildcards.run)]


def all_cmd_files(wildcards):
    """The ncu command records of every run (nsight backend), for the report's command list."""
    return [f"results/{r}/ncu/{c}.cmd.json" for r in RUNS for c in _captures(r)] if BACKEND == "nsight" else []


def captures_files(wildcards):
    """Every file under the captures directory, so that a changed or added capture reruns the import."""
    from pathlib import Path

    root = Path(config["captures"])
    if not root.is_dir():
        raise WorkflowError(f"config 'captures': {root} is not a directory")
    return sorted(str(p) for p in root.rglob("*") if p.is_file())
