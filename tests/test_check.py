"""The regression gate (results/check.txt) through the real workflow on the CPU: a baseline saved with one command,
an unchanged rerun passes it, a regression made on purpose (a slower workload argument) fails the workflow naming
the stage and the number."""

import shutil

import pandas as pd
import yaml
from conftest import snakemake, torch_workflow

from nsightflow.analysis.regression import RunNumbers, Thresholds, compare

# Host-bound steps: wall is the workload's sleep, so the thresholds on operator time are wide (a loaded CI machine's
# matmuls vary); the gate's job here is the wall.
CHECK = {"wall": 0.25, "busy": 1.0, "mfu": 0.6, "bandwidth": 0.6, "kernel_time": 1.5, "kernel_share": 0.05}


def _configure(work, sleep_ms, baseline="main"):
    cfg_path = work / "config" / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["workloads"][0]["args"]["sleep_ms"] = sleep_ms
    cfg["check"].update(CHECK, baseline=baseline)
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def test_a_slower_argument_fails_the_gate_and_an_unchanged_rerun_passes(tmp_path):
    work = torch_workflow(tmp_path, [{"name": "gate", "callable": "workloads:gate_steps", "args": {"sleep_ms": 40}}])
    _configure(work, 40)
    env = {**__import__("os").environ, "PYTHONPATH": str(work / "tests")}
    snakemake(work, "--cores", "1", "results/report.html", env=env)
    snakemake(work, "--cores", "1", "baselines/main", env=env)
    saved = work / "baselines" / "main" / "gate"
    assert {p.name for p in saved.iterdir()} >= {"stages.csv", "kernels.csv", "manifest.json", "summary.json"}
    # The same config profiled again: within thresholds and noise.
    shutil.rmtree(work / "results" / "gate")
    snakemake(work, "--cores", "1", "results/check.txt", env=env)
    text = (work / "results" / "check.txt").read_text()
    assert text.startswith("nsightflow check against main: PASS") and "gate step: wall per step (ms)" in text
    # Three times the sleep: the wall per step grows far beyond 25% plus noise; the workflow fails and says so.
    _configure(work, 120)
    failed = snakemake(work, "--cores", "1", "--show-failed-logs", "results/check.txt", check=False, env=env)
    assert failed.returncode != 0
    assert not (work / "results" / "check.txt").exists()
    log = (work / "results" / "logs" / "check.log").read_text()
    assert "FAIL" in log and "REGRESSION   gate step: wall per step (ms)" in log
    line = next(x for x in log.splitlines() if x.startswith("REGRESSION   gate step: wall per step"))
    base = pd.read_csv(saved / "stages.csv").set_index("stage").loc["step"]
    assert f"{base['wall_ms'] / base['range_instances']:.3g}" in line.replace(",", "")  # the baseline's own number
    assert "save it as the new baseline" in log


def test_a_run_against_itself_changes_nothing(tmp_path):
    """Every number of a recorded run compared with itself: change 0, verdict pass (the noise of its steps aside)."""
    from conftest import DATA

    run = tmp_path / "run"
    run.mkdir()
    src = DATA / "h100_probe"
    for name in ("stages.csv", "kernels.csv", "manifest.json"):
        shutil.copy(src / name, run / name)
    th = Thresholds.of({**CHECK, "noise": 3, "kernel_share": 0.05})
    table = compare(RunNumbers.read("r", run), RunNumbers.read("r", run), th)
    stages = pd.read_csv(src / "stages.csv")
    assert set(table["stage"]) == set(stages["stage"])
    compared = table[table["verdict"] != "not compared"]
    assert len(compared) and (compared["verdict"] == "pass").all() and (compared["change"] == 0).all()
    kernels = pd.read_csv(src / "kernels.csv")
    big = kernels.groupby("stage")["total_ns"].transform(lambda t: t >= 0.05 * t.sum())
    assert table["what"].str.startswith("kernel ").sum() == int(big.sum())


def test_save_and_check_need_a_baseline(tmp_path):
    work = torch_workflow(tmp_path, [{"name": "gate", "callable": "workloads:gate_steps", "args": {}}])
    out = snakemake(work, "--cores", "1", "-n", "results/check.txt", check=False)
    assert out.returncode != 0 and "results/check.txt needs config check.baseline" in out.stdout
    _configure(work, 40, baseline="nowhere")
    out = snakemake(work, "--cores", "1", "-n", "results/check.txt", check=False)
    assert "no baselines/nowhere; save one first: snakemake --cores 1 baselines/nowhere" in out.stdout


def test_kernels_removed_or_added_are_said_and_only_a_missing_stage_fails(tmp_path):
    """A fused kernel (gone from the run) or a new one is not a regression by itself (the stage's times judge the
    change); a stage gone is."""
    from conftest import DATA

    from nsightflow.analysis.regression import FAILING

    base, run = tmp_path / "base", tmp_path / "run"
    for folder in (base, run):
        folder.mkdir()
        for name in ("stages.csv", "kernels.csv", "manifest.json"):
            shutil.copy(DATA / "h100_probe" / name, folder / name)
    kernels = pd.read_csv(base / "kernels.csv")
    top = kernels[kernels["stage"] == "prefill"].sort_values("total_ns").iloc[-1]
    renamed = kernels.copy()
    renamed.loc[(renamed["stage"] == "prefill") & (renamed["kernel"] == top["kernel"]), "kernel"] = "fused_kernel"
    renamed.to_csv(run / "kernels.csv", index=False)
    th = Thresholds.of({**CHECK, "noise": 3})
    table = compare(RunNumbers.read("r", run), RunNumbers.read("r", base), th)
    said = table.set_index("what")["verdict"]
    assert said[f"kernel {top['kernel']} per step (ms)"] == "removed"
    assert said["kernel fused_kernel per step (ms)"] == "added"
    assert not table["verdict"].isin(FAILING).any()
    stages = pd.read_csv(base / "stages.csv")
    stages[stages["stage"] != "decode"].to_csv(run / "stages.csv", index=False)
    gone = compare(RunNumbers.read("r", run), RunNumbers.read("r", base), th)
    assert list(gone.loc[gone["verdict"] == "missing", "stage"]) == ["decode"]
