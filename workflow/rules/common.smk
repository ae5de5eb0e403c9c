import json
import sys

from snakemake.utils import validate


validate(config, schema="../schemas/config.schema.yaml")

WORKLOADS = {w["name"]: w for w in config["workloads"]}
RUNS = list(WORKLOADS)


wildcard_constraints:
    run="|".join(RUNS),
    capture="[A-Za-z0-9_.-]+",


def workload(wildcards):
    return WORKLOADS[wildcards.run]


def workload_dtype(wildcards):
    return str(workload(wildcards).get("args", {}).get("dtype", "bfloat16"))


def program(wildcards):
    """argv of the workload under the harness (the program nsys and ncu launch)."""
    from nsightflow.capture import harness_argv

    w = workload(wildcards)
    return harness_argv(
        w["callable"], w.get("args", {}), config["nvtx_domain"], config["warmup"], config["tools"]["python"]
    )


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
    return [f"results/{r}/ncu/{c}.cmd.json" for r in RUNS for c in _captures(r)]
