"""The workflow through Snakemake's Slurm executor and profiles/slurm, against a real Slurm cluster
(slurmctld, slurmd, slurmdbd with MariaDB: scripts/slurm_local.sh). Skipped where no cluster answers."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow, snakemake

pytestmark = pytest.mark.slurm

SMALL = dict(
    batch=2,
    prompt=16,
    decode_steps=2,
    vocab=256,
    d_model=32,
    n_layers=1,
    n_heads=2,
    d_ff=64,
    dtype="float32",
    device="cpu",
)

# Stand-ins for a GPU node's tools: they answer only inside a Slurm job, as on a cluster whose login
# node has no GPU and no Nsight. nvidia-smi names an H200; nsys and ncu give versions and profile nothing.
STAND_INS = {
    "nvidia-smi": """#!/bin/sh
[ -n "$SLURM_JOB_ID" ] || { echo "NVIDIA-SMI has failed: no NVIDIA driver on this host" >&2; exit 9; }
case "$*" in *driver_version*) echo "570.86.15";; *name*) echo "NVIDIA H200";; *) echo "stand-in nvidia-smi";; esac
""",
    "nsys": """#!/bin/sh
[ -n "$SLURM_JOB_ID" ] || exit 127
echo "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0 (stand-in)"
""",
    "ncu": """#!/bin/sh
[ -n "$SLURM_JOB_ID" ] || exit 127
echo "NVIDIA (R) Nsight Compute Command Line Profiler"
echo "Version 2025.2.1.0 (stand-in: profiles nothing)"
""",
}


def _workflow(tmp_path: Path, stand_ins: bool) -> tuple[Path, dict]:
    wf = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    cfg["workloads"] = [{"name": "tiny", "callable": "nsightflow.workloads.decoder:build", "args": SMALL}]
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NSIGHTFLOW_", "SLURM_", "SBATCH_"))}
    if stand_ins:
        bin_dir = tmp_path / "node-bin"
        bin_dir.mkdir()
        for name, text in STAND_INS.items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755 | stat.S_IXUSR)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return wf, env


def _submitted(out: str) -> dict[str, str]:
    """rule -> Slurm job id, from Snakemake's log of a run through the executor: each job's block names its rule and
    Snakemake's job id, and a later line says which Slurm job that id became (jobs submitted together print their
    blocks first, then their submissions)."""
    rules = {}
    for block in re.split(r"\n(?=\[)", out):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        jobid = re.search(r"^\s+jobid: (\d+)$", block, re.M)
        if rule and jobid:
            rules[jobid.group(1)] = rule.group(1)
    found = re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", out)
    return {rules[job]: slurm for job, slurm in found if job in rules}


# Snakemake's polling of the queue, quickened for a one-node cluster whose jobs take seconds: by default its first
# status check waits 40 s, later ones 10 s apart, and a failed job's outputs are awaited 60 s (the profile's
# latency-wait, for a shared file system's delay), which made these tests take 6.5 minutes, mostly waiting.
QUICK = (
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--seconds-between-status-checks",
    "1",
    "--latency-wait",
    "3",
)


def _through_slurm(wf: Path, *args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    """The workflow through profiles/slurm, as a user runs it, its queue polled quickly (``QUICK``)."""
    return snakemake(wf, "--profile", "profiles/slurm", *QUICK, *args, env=env, check=check)


def _sacct(job_id: str) -> dict:
    out = (
        subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,AllocTRES,Timelimit"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    state, tres, limit = out[0].split("|")
    return {"state": state, "tres": tres, "timelimit": limit}


def test_cpu_backend_runs_through_the_profile(tmp_path):
    wf, env = _workflow(tmp_path, stand_ins=False)
    proc = _through_slurm(wf, "results/report.html", "--config", "profiler=torch", env=env)
    assert (wf / "results" / "report.html").is_file()
    jobs = _submitted(proc.stdout)
    # Only the profiling job goes through the queue; plans, aggregation and reports run locally.
    assert set(jobs) == {"torch_profile"}, proc.stdout[-4000:]
    acct = _sacct(jobs["torch_profile"])
    assert acct["state"] == "COMPLETED"
    assert "gres/gpu" not in acct["tres"]  # the CPU backend asks for no GPU
    # The time limit comes from config torch.timeout_s (1800 s = 30 min) plus 10 minutes.
    assert acct["timelimit"] == "00:40:00"
    assert "mem=8000M" in acct["tres"]


def test_auto_on_a_login_node_without_a_gpu_runs_the_plan_it_made(tmp_path):
    # The login node sees no GPU: profiler auto chooses torch.profiler. The GPU node would choose
    # Nsight if it decided again, and would have no rule torch_profile (UnknownRuleException).
    wf, env = _workflow(tmp_path, stand_ins=True)
    proc = _through_slurm(wf, "results/report.html", env=env, check=False)
    assert "There is no rule named" not in proc.stdout
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert set(_submitted(proc.stdout)) == {"torch_profile"}
    manifest = yaml.safe_load((wf / "results" / "tiny" / "manifest.json").read_text())
    assert manifest["host"]["gpus"] == ["NVIDIA H200"]  # it did run on the "GPU node"


def test_nsight_plan_from_the_login_node_is_checked_on_the_gpu_node(tmp_path):
    wf, env = _workflow(tmp_path, stand_ins=True)
    # Without config `device` the login node cannot know the GPU's name: the node's preflight says so.
    proc = _through_slurm(wf, "results/report.html", "--config", "profiler=nsight", env=env, check=False)
    assert proc.returncode != 0 and "There is no rule named" not in proc.stdout
    assert set(_submitted(proc.stdout)) == {"preflight", "counters"}  # the counter check runs beside the others
    assert _sacct(_submitted(proc.stdout)["counters"])["tres"].count("cpu=1") == 1  # threads 0 is one CPU there
    log = (wf / "results" / "preflight" / "unknown-gpu.log").read_text()
    assert "planned for device 'unknown-gpu', this host's GPU is 'NVIDIA H200'" in log
    assert "Fix: set config `device: NVIDIA H200`" in log
    assert _sacct(_submitted(proc.stdout)["preflight"])["tres"].count("gres/gpu=1") == 1

    # With the device named, the node agrees with the plan; the stand-in ncu profiles nothing, so
    # the counter probe is the one check that fails (its job runs beside the timeline's), and no ncu capture is
    # attempted.
    proc = _through_slurm(
        wf,
        "results/report.html",
        "--config",
        "profiler=nsight",
        "device=NVIDIA H200",
        env=env,
        check=False,
    )
    assert proc.returncode != 0
    host = (wf / "results" / "preflight" / "NVIDIA-H200.log").read_text()
    assert not re.findall(r"^- (\w+):", host, re.M), host  # the host's checks passed
    log = (wf / "results" / "preflight" / "counters" / "NVIDIA-H200.log").read_text()
    failed = set(re.findall(r"^- (\w+):", log, re.M))
    assert failed == {"counters"}, log
    assert _sacct(_submitted(proc.stdout)["counters"])["tres"].count("gres/gpu=1") == 1  # on a GPU node
    assert not (wf / "results" / "tiny" / "ncu").exists()
