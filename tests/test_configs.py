"""The configurations in .test/ (named in the README): each is a valid config whose DAG plans; those that need no
GPU run to a report here."""

import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, copy_workflow, snakemake

CONFIGS = sorted((ROOT / ".test").glob("*.yaml"))
ON_CPU = ["cpu", "sweep", "training", "captures", "command", "ranks"]


def _copy(tmp_path: Path, name: str) -> tuple[Path, Path]:
    wf = copy_workflow(tmp_path / "wf")
    config = wf / ".test" / f"{name}.yaml"
    config.parent.mkdir(exist_ok=True)
    shutil.copy(ROOT / ".test" / f"{name}.yaml", config)
    if name == "captures":
        shutil.copytree(ROOT / "tests" / "data" / "handmade" / "train", wf / "tests" / "data" / "handmade" / "train")
    return wf, config


def test_every_config_is_listed_and_plans(tmp_path):
    listed = (ROOT / ".test" / "README.md").read_text()
    assert CONFIGS and all(f"`{c.name}`" in listed for c in CONFIGS)
    for config in CONFIGS:
        wf, path = _copy(tmp_path / config.stem, config.stem)
        extra = ["--config", "device=NVIDIA H200"] if config.stem in ("ranges", "deep") else []
        out = snakemake(wf, "-n", "--cores", "1", "results/report.html", "--configfile", str(path), *extra).stdout
        assert "rule" in out, out[-2000:]


@pytest.mark.parametrize("name", ON_CPU)
def test_the_cpu_configs_run_to_a_report(tmp_path, name):
    wf, path = _copy(tmp_path, name)
    snakemake(wf, "--cores", "2", "results/report.html", "--configfile", str(path))
    stages = sorted((wf / "results").rglob("stages.csv"))
    assert len(stages) == (2 if name == "sweep" else 1)
    for csv in stages:
        st = pd.read_csv(csv)
        assert len(st) and (st["wall_ms"] > 0).all() and (st["gpu_busy_ms"] > 0).all()
    assert (wf / "results" / "report.html").exists()
    if name == "cpu":  # each stage's peak resident memory holds at least the model's weights and KV cache
        import json

        run = stages[0].parent
        params = json.loads((run / "manifest.json").read_text())["params"]
        st = pd.read_csv(stages[0])
        assert (st["memory_rss_peak"] >= params["weights_bytes"] + params["kv_cache_bytes"]).all()
        assert st["memory_allocated_peak"].isna().all()  # no CUDA allocator on a CPU: not measured, never 0
