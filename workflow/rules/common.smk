import json
import re
import sys
from pathlib import Path

from snakemake.utils import validate

from nsightflow.analysis.focus import Focus
from nsightflow.capture.launch import hostfacts
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.domains import AUTO_DOMAIN
from nsightflow.rules.config import ConfigError, check, normalize
from nsightflow.rules.sweep import expand as expand_sweep
from nsightflow.rules.sweep import size_warning

SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
try:
    normalize(config, SCHEMA)  # --config values arrive as strings
    check(config, SCHEMA)
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
validate(config, schema="../schemas/config.schema.yaml")  # fills in the defaults

# Decided once per invocation and shared with every job, wherever a scheduler runs it (nsightflow.capture.launch.hostfacts).
FACTS = hostfacts.shared(config)
BACKEND, BACKEND_REASON, DEVICE = FACTS.backend, FACTS.reason, FACTS.device
# Versions of what produces the numbers: as params of the rules they shape, an upgrade reruns them.
TOOL_VERSIONS = FACTS.versions
# What profiling jobs ask a scheduler for (a GPU only where the profile needs one).
GPU_JOBS = int(FACTS.gpu_jobs)
if BACKEND == "captures":
    from nsightflow.capture.launch.imported import captures_run_id

    RUNS = {captures_run_id(config["captures"]): {"name": "captures", "args": {}, "point": {}}}
else:
    RUNS = expand_sweep(config["workloads"])
if size_warning(len(RUNS), BACKEND, config["sweep_warn"]):
    print(size_warning(len(RUNS), BACKEND, config["sweep_warn"]), file=sys.stderr)


wildcard_constraints:
    run="|".join(re.escape(r) for r in RUNS),
    device="[A-Za-z0-9_.+-]+",
    baseline="[A-Za-z0-9_][A-Za-z0-9_.-]*",


def run_spec(wildcards):
    return RUNS[wildcards.run]


def _is_command(spec):
    """Whether a run's program is a command (a callable run as several processes is one: nsightflow.capture.inside.runner)."""
    return "command" in spec or (spec.get("nprocs") or 1) > 1


# The runs whose ncu launch starts with their timeline (config ncu.start; the capture rule), the commands; "(?!)" none
STARTS_WITH_TIMELINE = (
    "|".join(
        re.escape(r) for r, spec in RUNS.items() if config["ncu"]["start"] == "with_timeline" and _is_command(spec)
    )
    or "(?!)"
)


def gpu_jobs(wildcards):
    """The GPUs a profiling job of this run asks the scheduler for: a command's gpus: (one per rank), else one."""
    return GPU_JOBS * (run_spec(wildcards).get("gpus") or 1)


def profile_threads(wildcards):
    """A profiling job on the CPU takes every core, so it runs alone: its walls and measured ceilings are the
    machine's, not shared with another job's (the program keeps the user's own thread settings: hostfacts).
    Under a cluster executor (and inside its job, which must ask for what was submitted) there is no total
    of cores: the job asks for one CPU unless the profile's `set-threads` says more (profiles/slurm)."""
    if GPU_JOBS or workflow.remote_exec or not workflow.local_exec:
        return 1
    return max(1, workflow.cores or 1)


def steps_by(spec):
    """A command's stages: its NVTX ranges (domain, stages), or the calls of the functions it names (step_functions:
    nsightflow's automatic domain, one stage per function)."""
    functions = spec.get("step_functions") or {}
    if functions:
        inputs = dict(spec.get("step_inputs") or {})
        return {
            "domain": AUTO_DOMAIN,
            "stages": list(functions),
            "step_functions": dict(functions),
            "step_inputs": inputs,
        }
    return {"domain": spec.get("domain"), "stages": spec.get("stages")}


def harness_call(wildcards):
    """The workload's launch (nsightflow.capture.inside.harness.HarnessCall's fields, or a command's:
    nsightflow.capture.launch.command_call.CommandCall's, also for a callable run as several processes: nsightflow.capture.inside.runner):
    what the profilers run; the interpreter's path canonical, so that
    the same Python under another name reruns nothing."""
    from nsightflow.capture.inside.harness import canonical_python

    spec = run_spec(wildcards)
    if "command" in spec:
        return _canonical(
            {
                "command": spec["command"],
                "args": spec["args"],
                "env": spec.get("env") or {},
                "cwd": spec.get("cwd"),
                **steps_by(spec),
                "mirror": config["nvtx_domain"],
                "dtype": spec["args"].get("dtype"),
                "rank": spec.get("rank") or 0,
                "gpus": spec.get("gpus") or 1,
                "warmup_steps": spec.get("warmup_steps", "auto"),
                "window": spec.get("window"),
            }
        )
    python = canonical_python(config["tools"]["python"] or sys.executable)
    if (spec.get("nprocs") or 1) > 1:
        from nsightflow.capture.inside.runner import command_fields

        return _canonical(
            command_fields(
                spec["callable"],
                spec["args"],
                spec["nprocs"],
                config["warmup"],
                python,
                config["nvtx_domain"],
                spec.get("rank") or 0,
                spec.get("gpus") or 1,
                str(Path(f"results/{wildcards.run}/logs/torchrun").absolute()),
            )
        )
    return _canonical(
        {
            "spec": spec["callable"],
            "args": spec["args"],
            "domain": config["nvtx_domain"],
            "warmup": config["warmup"],
            "python": python,
        }
    )


def workload_code(wildcards):
    """The workload's own source (its digest) and declared version: editing the model's module reruns its profile."""
    from nsightflow.rules.code import code_identity

    return _canonical(code_identity(run_spec(wildcards)))


def diff_inputs(wildcards):
    """The two runs config diff names: run ids of this config (made if needed) or folders of runs made elsewhere."""
    if not config.get("diff"):
        raise WorkflowError("results/diff.html needs config diff: {before: <run id or folder>, after: <...>}")
    files = {}
    for side in ("before", "after"):
        ref = config["diff"][side]
        folder = f"results/{ref}" if ref in RUNS else ref
        for name in ("stages", "kernels", "summary", "manifest"):
            files[f"{side}_{name}"] = f"{folder}/{name}.{'json' if name in ('summary', 'manifest') else 'csv'}"
    return files


def check_pairs():
    """Each run of this config and its baseline's folder (config check.baseline; nsightflow.analysis.regression): a
    run id of this config (every other run against it), a folder of one run, a folder of runs (each run against its
    namesake there; None where it has none), or a name saved under baselines/."""
    ref = config["check"]["baseline"]
    if not ref:
        raise WorkflowError(
            "results/check.txt needs config check.baseline: a run id of this config, a name saved with "
            "`snakemake --cores 1 baselines/NAME`, or a folder of runs"
        )
    if ref in RUNS:
        return {run: (f"results/{run}", f"results/{ref}") for run in RUNS if run != ref}
    folder = Path(ref) if Path(ref).is_dir() else Path("baselines") / ref
    if not folder.is_dir():
        raise WorkflowError(
            f"config check.baseline {ref!r}: no run id of this config ({', '.join(RUNS)}), no folder {ref}, and no "
            f"baselines/{ref}; save one first: snakemake --cores 1 baselines/{ref}"
        )
    if (folder / "stages.csv").exists():
        return {run: (f"results/{run}", str(folder)) for run in RUNS}
    return {run: (f"results/{run}", str(folder / run) if (folder / run).is_dir() else None) for run in RUNS}


def check_inputs(wildcards):
    """The files results/check.txt compares: every run's and its baseline's stage and kernel tables and manifest."""
    found = []
    for mine, base in check_pairs().values():
        for folder in (mine, base) if base else (mine,):
            found += [f"{folder}/{name}" for name in ("stages.csv", "kernels.csv", "manifest.json")]
    return sorted(set(found))


def card_inputs(wildcards):
    """The deep-dive cards of the top kernel classes, when config ncu.deep_dive asks for them (Nsight backend)."""
    if BACKEND != "nsight" or not config["ncu"]["deep_dive"]:
        return {}
    return {"cards": f"results/{wildcards.run}/cards.json"}


def range_inputs(wildcards):
    """The range capture and its plan, when config ncu.ranges asks for range results beside the kernel ones."""
    if config["ncu"]["ranges"] == "none":
        return {}
    return {
        "ranges": f"results/{wildcards.run}/ncu/ranges.raw.csv",
        "ranges_plan": f"results/{wildcards.run}/ranges.plan.json",
        "ranges_cmd": f"results/{wildcards.run}/ncu/ranges.cmd.json",
    }


def captures_files(wildcards):
    """Every file under the captures directory, so that a changed or added capture reruns the import."""
    root = Path(config["captures"])
    if not root.is_dir():
        raise WorkflowError(f"config 'captures': {root} is not a directory")
    return sorted(str(p) for p in root.rglob("*") if p.is_file())


def _canonical(value):
    """Keys sorted at every level: reordering keys in the config file is not a change that reruns jobs."""
    return json.loads(json.dumps(value, sort_keys=True))


def capture_settings(wildcards):
    """The config values that shape a run's capture (its manifest records them)."""
    return _canonical(
        {
            "run": wildcards.run,
            "backend": BACKEND,
            "workload": run_spec(wildcards),
            "nvtx_domain": config["nvtx_domain"],
            "warmup": config["warmup"],
        }
    )


def run_settings(wildcards):
    """Every config value that shapes a run's numbers, shown on its page."""
    return _canonical(
        {
            **capture_settings(wildcards),
            "select": config["select"],
            "ncu": config["ncu"] if BACKEND == "nsight" else None,
            "divergence": config["report"]["divergence"],
        }
    )


def ncu_settings(**fixed):
    """A capture rule's ncu settings (nsightflow.capture.launch.ncu_settings), with the keys its kind of capture fixes."""
    return NcuSettings.of(config, **fixed).params()


def focus():
    """What the aggregation rules' tables dwell on (nsightflow.analysis.focus: config select and report.divergence)."""
    return Focus.of(config).params()


def runtime_min(timeout_s, margin_min=10):
    """A scheduler's time limit (minutes) for a job whose program stops itself after ``timeout_s``."""
    return -(-int(timeout_s) // 60) + margin_min


# Peak resident memory measured for the jobs (README "Clusters"), with headroom: the workload under
# its profiler (the built-in decoder's harness peaks at 0.8 GB; a user's model needs its own figure,
# set with --set-resources), and the analysis of a 1M-launch timeline (0.8 GB, scripts/scale_benchmark.py).
MEM_MB = {"profile": 8000, "analysis": 3000, "light": 1000}
