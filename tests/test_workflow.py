"""The real Snakemake on a temporary copy of the workflow: lint, DAG, config validation, report escaping."""

import datetime
import re

import pandas as pd
import pytest
import yaml
from conftest import DATA, copy_workflow, snakemake

from nsightflow.records import Peaks
from nsightflow.report import pages


@pytest.mark.parametrize("extra", [[], ["--config", "profiler=nsight"], ["--config", f"captures={DATA}"]])
def test_lint_is_clean(tmp_path, extra):
    wf = copy_workflow(tmp_path)
    out = snakemake(wf, "--lint", *extra, check=False).stdout
    assert "Lints for" not in out and "good condition" in out, out


def test_dry_run_plans_each_backend(tmp_path):
    wf = copy_workflow(tmp_path)
    out = snakemake(wf, "-n", "--cores", "1", "results/report.html", "--config", "profiler=nsight").stdout
    rules = set(re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):$", out, re.M))
    # One program launch for the timeline (with the analytic count and ceilings), one for all ncu captures (planned in
    # the capture's own job); the host's checks before the timeline, the counters' before ncu.
    assert rules == {"preflight", "counters", "timeline", "ncu_capture", "aggregate", "run_report", "report"}
    out = snakemake(
        wf, "-n", "--cores", "1", "results/report.html", "--config", "profiler=nsight", "ncu={ranges: app-range}"
    ).stdout
    assert {"range_plan", "ncu_ranges"} <= set(re.findall(r"^(?:local)?rule (\w+):$", out, re.M))
    out = snakemake(wf, "-n", "--cores", "1", "results/report.html", "--config", "profiler=torch").stdout
    assert set(re.findall(r"^(?:local)?rule (\w+):$", out, re.M)) == {
        "torch_profile",
        "aggregate_torch",
        "run_report",
        "report",
    }


def test_a_commands_ncu_launch_starts_with_its_timeline_in_one_job_where_asked(tmp_path):
    """Config ncu.start with_timeline: a command's timeline and ncu capture are one job (rule capture), a callable's
    keep their two (its ncu launch cannot wait for its timeline); after_timeline, the default, keeps every run's
    apart."""
    wf = copy_workflow(tmp_path)
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    cfg["workloads"].append({"name": "cmd", "command": ["python3", "examples/nvtx_program.py"]})
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    def jobs(*extra):
        out = snakemake(wf, "-n", "--cores", "1", "results/report.html", "--config", "profiler=nsight", *extra).stdout
        found = re.findall(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    wildcards: run=(\w+)", out, re.M)
        return sorted(set(found))

    apart = [("aggregate", r) for r in ("cmd", "tinyllm")] + [("ncu_capture", "cmd"), ("ncu_capture", "tinyllm")]
    apart += [("run_report", "cmd"), ("run_report", "tinyllm"), ("timeline", "cmd"), ("timeline", "tinyllm")]
    assert jobs() == sorted(apart)
    together = [j for j in apart if j not in {("ncu_capture", "cmd"), ("timeline", "cmd")}] + [("capture", "cmd")]
    assert jobs("ncu={start: with_timeline}") == sorted(together)


BAD_CONFIGS = [
    (lambda c: c["select"].update(top_n=0), "config select.top_n: 0 is less than the minimum of 1"),
    (lambda c: c.update(selectt={}), "unknown key(s) 'selectt' (did you mean 'select'?)"),
    (lambda c: c["workloads"][0].update(name=".."), "config workloads.0.name: '..' does not match"),
    (
        lambda c: c["workloads"][0].update(sweep={"../../../escape": [1, 2]}),
        "config workloads.0.sweep: '../../../escape' does not match",
    ),
    (lambda c: c["workloads"][0]["args"].update(dtype="Float32"), "did you mean 'float32'?"),
    (lambda c: c.update(select={"top_n": None, "coverage": None}), "top_n and coverage are both null"),
    (
        lambda c: c["workloads"][0]["args"].update(when=datetime.date(2026, 1, 1)),
        "Object of type date is not JSON serializable; write dates and other YAML types as quoted strings",
    ),
]


@pytest.mark.parametrize("change,message", BAD_CONFIGS)
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path, change, message):
    wf = copy_workflow(tmp_path)
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    change(cfg)
    (wf / "config" / "config.yaml").write_text(yaml.dump(cfg))
    proc = snakemake(wf, "--cores", "1", "results/report.html", check=False)
    assert proc.returncode != 0 and message in proc.stdout, proc.stdout[-2000:]
    assert len(proc.stdout.splitlines()) < 20  # the error, not the schema
    assert not (wf / "results").exists() and not (tmp_path / "escape").exists()


def test_report_escapes_kernel_names():
    kernels = pd.DataFrame(
        [
            {
                "stage": "prefill",
                "rank": 1,
                "kernel": "void k<(int)4, a&b>(T1)",
                "instances": 1,
                "total_ns": 10.0,
                "share": 1.0,
                "arithmetic_intensity": 2.0,
                "achieved_flops_per_s": 1e12,
            }
        ]
    )
    stages = pd.DataFrame([{"stage": "prefill", "wall_ms": 1.0}])
    pk = Peaks(precision="bf16", device_name=None, compute=1e15, compute_source="test", dram=4e12, dram_source="test")
    html = pages.render_run(
        {"run_id": "r<1>", "kernels": kernels, "stages": stages, "peaks": pk, "diagnostics": []}, "nsight", "", {}
    )
    assert "void k&lt;(int)4, a&amp;b&gt;(T1)" in html and "<(int)4" not in html
    assert "r&lt;1&gt;" in html and "data:image/png;base64," in html


def test_the_workflow_copy_takes_the_workflow_not_the_checkout(tmp_path):
    from conftest import WORKFLOW

    wf = copy_workflow(tmp_path / "wf")
    # A virtual environment, results or the package sources in the checkout never reach the copy (one suite
    # once copied a 5.5 GB venv into every test); no git is needed either.
    assert {p.name for p in wf.iterdir()} <= set(WORKFLOW)
    assert not (wf / "tests" / "data").exists() and (wf / "tests" / "workloads.py").exists()


def test_command_line_overrides_arrive_typed(tmp_path):
    wf = copy_workflow(tmp_path)
    # Snakemake 9 passes nested --config values as strings ({'top_n': '3'}): they must not fail the schema.
    out = snakemake(
        wf,
        "-n",
        "--cores",
        "1",
        "results/report.html",
        "--config",
        "select={top_n: 3}",
        "ncu={sample_steps: [first], timeout_s: 60}",
    ).stdout
    assert "Building DAG of jobs" in out and "not of type" not in out
    from nsightflow.rules.config import coerce

    schema = yaml.safe_load((wf / "workflow" / "schemas" / "config.schema.yaml").read_text())
    got = coerce(
        {
            "select": {"top_n": "3", "coverage": "null"},
            "workloads": [{"name": "a", "callable": "m:f", "args": {"batch": "2", "model": "/models/7"}}],
        },
        schema,
    )
    assert got["select"] == {"top_n": 3, "coverage": None}
    assert got["workloads"][0]["args"] == {"batch": 2, "model": "/models/7"}
    # Strings that YAML 1.1 would change stay as written: a zero-padded count, a version, a word, an empty string.
    kept = {"steps": "010", "version": "1.10", "mode": "off", "tag": "", "ratio": "0.5", "lr": "1e-3", "on": "true"}
    got = coerce({"workloads": [{"name": "a", "callable": "m:f", "args": kept}]}, schema)["workloads"][0]["args"]
    assert got == {"steps": "010", "version": "1.10", "mode": "off", "tag": "", "ratio": 0.5, "lr": 1e-3, "on": True}


def test_the_aggregate_rule_on_a_gpu_hosts_recorded_files_gives_that_hosts_tables(tmp_path):
    """The Nsight aggregate rule (its script, its named inputs) run by Snakemake on a CPU over the files an H100 run
    made (tests/data/h100_probe, placed where the workflow writes them): the stage table the GPU host wrote."""
    import shutil

    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    cfg["profiler"] = "nsight"
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    run, src = work / "results" / cfg["workloads"][0]["name"], DATA / "h100_probe"
    places = {"timeline.sqlite": "timeline", "capture.raw.csv": "ncu", "capture.cmd.json": "ncu"}
    for name in ("timeline.sqlite", "plan.json", "capture.raw.csv", "capture.cmd.json", "analytic_flops.json"):
        (run / places.get(name, "")).mkdir(parents=True, exist_ok=True)
        shutil.copy(src / name, run / places.get(name, "") / name)
    for name in ("ceilings.json", "manifest.json"):
        shutil.copy(src / name, run / name)
    snakemake(work, "--cores", "1", str((run / "stages.csv").relative_to(work)), "--allowed-rules", "aggregate")
    got, host = (pd.read_csv(p / "stages.csv").set_index("stage") for p in (run, src))
    cols = ("wall_ms", "gpu_busy_ms", "flops_tensor_measured", "dram_bytes_measured", "coverage", "mfu_busy")
    for col in (*cols, "mfu_busy_ceiling"):  # the timed walls (manifest) and the measured ceilings (ceilings) read
        assert got[col].to_dict() == pytest.approx(host[col].to_dict(), rel=1e-9), col
