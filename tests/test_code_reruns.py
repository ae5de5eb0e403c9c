"""Editing a workload's own code reruns its profiling (the callable's module file, a command's script, or a declared
code_version), and nothing else does."""

from __future__ import annotations

import shutil

import yaml
from conftest import ROOT, copy_workflow, snakemake

MODEL = """import torch
from nsightflow.workloads import Stage, Workload


def build(n: int = 64):
    layer = torch.nn.Sequential(torch.nn.Linear(n, n), torch.nn.GELU())
    x = torch.randn(8, n)

    def forward(step: int) -> None:
        with torch.no_grad():
            layer(x)

    return Workload(setup=lambda: None, stages=[Stage("forward", forward, repeats=2)], dtype="float32")
"""


def _jobs(work, env=None) -> str:
    return snakemake(work, "-n", "--cores", "1", "results/report.html", env=env).stdout


def test_editing_the_model_or_the_script_reruns_its_profile(tmp_path):
    work = copy_workflow(tmp_path / "wf")
    (work / "mymodel.py").write_text(MODEL)
    shutil.copy(ROOT / "examples" / "nvtx_program.py", work / "script.py")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    cfg.update(
        profiler="torch",
        workloads=[
            {"name": "mine", "callable": "mymodel:build"},
            {"name": "script", "command": ["python3", "script.py", "--steps", "2"], "domain": "LLM"},
        ],
    )
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {"PYTHONPATH": str(work)}
    import os

    env = {**os.environ, **env}
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    assert "Nothing to be done" in _jobs(work, env)

    (work / "mymodel.py").write_text(MODEL.replace("GELU", "ReLU"))  # the model's own code changed
    plan = _jobs(work, env)
    assert "results/mine/torch/trace.json" in plan and "results/script/torch/trace.json" not in plan
    snakemake(work, "--cores", "1", "results/report.html", env=env)

    script = work / "script.py"
    script.write_text(script.read_text().replace("torch.nn.GELU()", "torch.nn.ReLU()"))
    plan = _jobs(work, env)
    assert "results/script/torch/trace.json" in plan and "results/mine/torch/trace.json" not in plan

    # A declared version reruns too (code the digest does not follow: another module the model imports).
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    cfg["workloads"][0]["code_version"] = "2"
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    plan = _jobs(work, env)
    assert "results/mine/torch/trace.json" in plan and "results/script/torch/trace.json" not in plan


def test_the_code_identity_follows_the_file_and_the_declared_version(tmp_path):
    import hashlib

    import nsightflow.workloads.decoder as decoder
    from nsightflow.rules.code import code_identity
    from nsightflow.rules.config import coerce

    digest = hashlib.sha256(open(decoder.__file__, "rb").read()).hexdigest()
    assert code_identity({"callable": "nsightflow.workloads.decoder:build"})["sha256"] == digest
    assert code_identity({"command": ["python", "-m", "nsightflow.workloads.decoder"]})["sha256"] == digest
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    ident = code_identity({"command": ["python", "s.py"], "cwd": str(tmp_path), "code_version": "7"})
    assert ident == {"version": "7", "file": str(script), "sha256": hashlib.sha256(b"print(1)\n").hexdigest()}
    # a version given on the command line stays the string it is
    assert coerce("2", {"type": ["null", "string"]}) == "2" and coerce("3", {"type": ["integer"]}) == 3
