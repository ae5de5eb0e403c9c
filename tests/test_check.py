"""The regression gate (results/check.txt) through the real workflow on the CPU: a baseline saved with one command,
an unchanged rerun passes it, a regression made on purpose (a slower workload argument) fails the workflow naming
the stage and the number."""

import shutil

import pandas as pd
import pytest
import yaml
from conftest import snakemake, torch_workflow

from nsightflow.analysis.regression import FAILING, RunNumbers, Thresholds, compare

# Host-bound steps: wall is the workload's sleep, so the thresholds on operator time are wide: four 16-square matmuls
# take about 40 us a step on a CPU, and a loaded 2-core CI machine made them 2.8x slower in an unchanged rerun
# (busy 0.040 -> 0.113 ms). The gate's job in the workflow test is the wall; the operator numbers' gate is tested on
# a GPU capture below, whose busy time is stable.
CHECK = {"wall": 0.25, "busy": 10.0, "mfu": 10.0, "bandwidth": 10.0, "kernel_time": 10.0, "kernel_share": 0.05}


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


def _two_copies(tmp_path):
    """A recorded H100 run's tables in two folders, ``base`` and ``run``, for a test to change one."""
    from conftest import DATA

    base, run = tmp_path / "base", tmp_path / "run"
    for folder in (base, run):
        folder.mkdir()
        for name in ("stages.csv", "kernels.csv", "manifest.json"):
            shutil.copy(DATA / "h100_probe" / name, folder / name)
    return base, run


def test_kernels_removed_or_added_are_said_and_only_a_missing_stage_fails(tmp_path):
    """A fused kernel (gone from the run) or a new one is not a regression by itself (the stage's times judge the
    change); a stage gone is."""
    base, run = _two_copies(tmp_path)
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


def test_a_stage_whose_gpu_time_grew_half_fails_on_busy_mfu_bandwidth_and_its_kernels(tmp_path):
    """A recorded H100 run against itself with every prefill kernel 1.5x slower (its stage busy time too, its FLOPs
    and bytes unchanged): busy +50%, FLOP/s and bytes/s on busy -33.3% (1/1.5 - 1), each kernel +50%, all beyond a
    10% threshold plus the noise of the run's own step walls; the wall and the decode stage unchanged pass."""
    base, run = _two_copies(tmp_path)
    stages = pd.read_csv(base / "stages.csv")
    stages.loc[stages["stage"] == "prefill", "gpu_busy_ms"] *= 1.5
    stages.to_csv(run / "stages.csv", index=False)
    kernels = pd.read_csv(base / "kernels.csv")
    kernels.loc[kernels["stage"] == "prefill", "total_ns"] *= 1.5
    kernels.to_csv(run / "kernels.csv", index=False)
    th = Thresholds.of(
        {"wall": 0.1, "busy": 0.1, "mfu": 0.1, "bandwidth": 0.1, "kernel_time": 0.1, "kernel_share": 0.05, "noise": 3}
    )
    table = compare(RunNumbers.read("r", run), RunNumbers.read("r", base), th)
    prefill = table[table["stage"] == "prefill"].set_index("what")
    assert prefill.loc["busy per step (ms)", "change"] == pytest.approx(0.5)
    assert prefill.loc["model FLOP/s on busy (MFU) (FLOP/s)", "change"] == pytest.approx(1 / 1.5 - 1)
    assert prefill.loc["bytes/s on busy (bandwidth use) (B/s)", "change"] == pytest.approx(1 / 1.5 - 1)
    for what in ("busy per step (ms)", "model FLOP/s on busy (MFU) (FLOP/s)", "bytes/s on busy (bandwidth use) (B/s)"):
        assert prefill.loc[what, "verdict"] == "regression"
    assert prefill.loc["wall per step (ms)", "verdict"] == "pass"
    kernel_rows = prefill[prefill.index.str.startswith("kernel ")]
    assert len(kernel_rows) and (kernel_rows["verdict"] == "regression").all()
    assert kernel_rows["change"].to_numpy() == pytest.approx(0.5)
    decode = table[table["stage"] == "decode"]
    assert not decode["verdict"].isin(FAILING).any() and (decode["change"].dropna() == 0).all()
