"""Sweeps on the CPU (torch backend): run ids, the cross-run report, and reruns of exactly the stale jobs.

Each invalidation case edits config/config.yaml of a workflow that has run and asks the real
Snakemake what it would run (``-n``); the expected jobs follow from which rule each value reaches.
"""

import re

import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, snakemake

from nsightflow.rules.sweep import expand, points, run_id

TINY = {
    "vocab": 256,
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "d_ff": 48,
    "decode_steps": 2,
    "dtype": "float32",
    "device": "cpu",
}


def test_points_and_ids():
    assert points({"batch": [1, 2], "prompt": [8, 16]}) == [
        {"batch": 1, "prompt": 8},
        {"batch": 1, "prompt": 16},
        {"batch": 2, "prompt": 8},
        {"batch": 2, "prompt": 16},
    ]
    assert points({"batch": [1, 2], "prompt": [8, 16]}, "zip") == [
        {"batch": 1, "prompt": 8},
        {"batch": 2, "prompt": 16},
    ]
    with pytest.raises(ValueError, match="one length"):
        points({"batch": [1, 2], "prompt": [8]}, "zip")
    assert run_id("tiny", {"batch": 4, "dtype": "bfloat16"}) == "tiny/batch~4/dtype~bfloat16"
    runs = expand([{"name": "m", "callable": "a:b", "args": {"batch": 1, "x": 0}, "sweep": {"batch": [2, 3]}}])
    assert runs["m/batch~3"]["args"] == {"batch": 3, "x": 0}
    with pytest.raises(ValueError, match="share the run id"):
        expand([{"name": "m", "callable": "a:b"}, {"name": "m", "callable": "a:c"}])
    # Whatever the schema let through, no run id names a folder outside results/.
    for name in ("..", ".", "a/../.."):
        with pytest.raises(ValueError, match="outside results/"):
            expand([{"name": name, "callable": "a:b"}])


def _config(wf):
    return yaml.safe_load((wf / "config" / "config.yaml").read_text())


def _write(wf, cfg):
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def _planned(wf) -> list[tuple[str, str | None]]:
    """(rule, run) of every job a dry run plans."""
    out = snakemake(wf, "-n", "--cores", "1", "results/report.html").stdout
    if "Nothing to be done" in out:
        return []
    jobs, rule = [], None
    for line in out.splitlines():
        m = re.match(r"^(?:local)?(?:rule|checkpoint) (\w+):$", line.strip())
        if m:
            rule = m.group(1)
            jobs.append([rule, None])
        m = re.match(r"^wildcards: .*run=([^,\s]+)", line.strip())
        if m and jobs:
            jobs[-1][1] = m.group(1)
    return sorted((r, run) for r, run in jobs if r != "all")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("sweep"))
    cfg = _config(wf)
    cfg["workloads"] = [
        {
            "name": "tiny",
            "callable": "nsightflow.workloads.decoder:build",
            "args": TINY,
            "sweep": {"batch": [1, 2], "prompt": [8, 16]},
        },
        {"name": "other", "callable": "nsightflow.workloads.decoder:build", "args": {**TINY, "batch": 1, "prompt": 8}},
    ]
    _write(wf, cfg)
    snakemake(wf, "--cores", "2", "results/report.html")
    return wf


RUNS = ["tiny/batch~1/prompt~8", "tiny/batch~1/prompt~16", "tiny/batch~2/prompt~8", "tiny/batch~2/prompt~16", "other"]


def test_sweep_runs_and_the_report_compares_them(swept):
    html = (swept / "results" / "report.html").read_text()
    for rid in RUNS:
        st = pd.read_csv(swept / "results" / rid / "stages.csv").set_index("stage")
        assert st.loc["prefill", "wall_ms"] > 0
        assert f"href='{rid}/report.html'" in html and (swept / "results" / rid / "report.html").exists()
    assert "<h3>Against batch (workload argument swept)</h3>" in html and "<h3>Against prompt (" in html
    manifest = yaml.safe_load((swept / "results" / RUNS[3] / "manifest.json").read_text())
    assert manifest["args"]["batch"] == 2 and manifest["args"]["prompt"] == 16
    assert manifest["settings"]["workload"]["point"] == {"batch": 2, "prompt": 16}
    assert {"nsightflow", "torch"} <= set(manifest["versions"]) and "host" in manifest
    # Prefill FLOPs grow with batch x prompt (the model's matmuls are linear in the tokens).
    fl = {
        rid: pd.read_csv(swept / "results" / rid / "stages.csv").set_index("stage").loc["prefill", "flops_analytic"]
        for rid in RUNS[:4]
    }
    assert fl["tiny/batch~2/prompt~16"] > fl["tiny/batch~1/prompt~8"]


def test_touching_nothing_runs_nothing(swept):
    assert _planned(swept) == []


def test_top_n_reruns_selection_and_what_follows_not_the_profile(swept):
    cfg = _config(swept)
    base = (swept / "config" / "config.yaml").read_text()
    cfg["select"]["top_n"] = 3
    _write(swept, cfg)
    try:
        jobs = _planned(swept)
    finally:
        (swept / "config" / "config.yaml").write_text(base)
    assert sorted({r for r, _ in jobs}) == ["aggregate_torch", "report", "run_report"]
    assert sorted(run for r, run in jobs if r == "aggregate_torch") == sorted(RUNS)


def test_report_only_option_reruns_only_the_report(swept):
    cfg = _config(swept)
    base = (swept / "config" / "config.yaml").read_text()
    cfg["report"]["title"] = "another title"
    _write(swept, cfg)
    try:
        jobs = _planned(swept)
    finally:
        (swept / "config" / "config.yaml").write_text(base)
    assert sorted({r for r, _ in jobs}) == ["report", "run_report"]


def test_one_points_parameter_reruns_only_that_point(swept):
    cfg = _config(swept)
    base = (swept / "config" / "config.yaml").read_text()
    cfg["workloads"][1]["args"]["n_layers"] = 2
    _write(swept, cfg)
    try:
        jobs = _planned(swept)
    finally:
        (swept / "config" / "config.yaml").write_text(base)
    assert {run for _, run in jobs} == {"other", None}
    assert sorted(r for r, _ in jobs) == ["aggregate_torch", "report", "run_report", "torch_profile"]


def test_adding_a_point_runs_only_it_and_the_report(swept):
    cfg = _config(swept)
    base = (swept / "config" / "config.yaml").read_text()
    cfg["workloads"][0]["sweep"]["batch"] = [1, 2, 3]
    _write(swept, cfg)
    try:
        jobs = _planned(swept)
    finally:
        (swept / "config" / "config.yaml").write_text(base)
    assert {run for _, run in jobs} == {"tiny/batch~3/prompt~8", "tiny/batch~3/prompt~16", None}
    assert sorted(r for r, run in jobs if run is None) == ["report"]


def test_reordering_config_keys_runs_nothing(swept):
    base = (swept / "config" / "config.yaml").read_text()
    cfg = _config(swept)
    (swept / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=True))
    try:
        assert _planned(swept) == []
    finally:
        (swept / "config" / "config.yaml").write_text(base)


def test_the_same_python_under_another_name_reruns_nothing(swept):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from nsightflow.capture.inside.harness import canonical_python

    exe = Path(sys.executable)
    aliases = [
        p
        for p in exe.parent.iterdir()
        if p != exe and p.name.startswith("python") and canonical_python(str(p)) == canonical_python(str(exe))
    ]
    if not aliases:
        pytest.skip(f"no other name for {exe} in its folder")
    out = subprocess.run(
        [str(aliases[0]), "-m", "snakemake", "-n", "--cores", "1", "results/report.html"],
        cwd=swept,
        capture_output=True,
        text=True,
        env={**os.environ},
    ).stdout
    assert "Nothing to be done" in out, out[-1500:]
