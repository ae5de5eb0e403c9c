"""Trust under hostile inputs and faults, on the CPU: no exit 0 with a wrong number, no process outliving its job,
every documented mode working. Each case is a real Snakemake run (or the library function a rule calls) on real
inputs from tests/data, edited the way a user or a fault could."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import DATA, EVERY_CLASS, aggregate_recorded, copy_workflow, process_alive, snakemake

from nsightflow.analysis import checks, peaks, runfiles
from nsightflow.records import CaptureRecord, Ceilings


def _workflow(tmp_path, workloads, **overrides):
    wf = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    cfg["workloads"] = workloads
    for key, value in overrides.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return wf, {**os.environ, "PYTHONPATH": str(wf / "tests")}


def _gone(pid: int, within_s: float = 10) -> bool:
    deadline = time.time() + within_s
    while process_alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    return not process_alive(pid)


# --- processes a job starts end with it ------------------------------------------------------------------------------


@pytest.mark.parametrize("new_session", [False, True], ids=["same-session", "own-session"])
def test_a_helper_the_workload_leaves_running_is_killed_with_the_job(tmp_path, new_session):
    marker = tmp_path / "helper.pid"
    args = {"marker": str(marker), "new_session": new_session}
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:helper_process", "args": args}])
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    helpers = [int(x) for x in marker.read_text().split()]  # one per pass over the stage: 4 in one launch
    assert len(helpers) == 4 and all(_gone(pid, 5) for pid in helpers), "a helper outlived its job"
    log = (wf / "results" / "w" / "logs" / "torch_profile.log").read_text()
    assert "left 4 process(es) running when it ended; they were killed" in log
    assert all(f"{pid} sleep 97" in log for pid in helpers)


def test_a_helper_holding_the_output_pipe_does_not_hold_the_job(tmp_path):
    marker = tmp_path / "helper.pid"
    args = {"marker": str(marker), "new_session": True, "hold_stdout": True}
    wf, env = _workflow(
        tmp_path, [{"name": "w", "callable": "workloads:helper_process", "args": args}], torch={"timeout_s": 60}
    )
    start = time.time()
    snakemake(wf, "--cores", "1", "results/w/stages.csv", env=env)
    took = time.time() - start
    assert took < 50, f"the job waited {took:.0f} s on a pipe its workload's helper held"
    assert all(_gone(int(pid), 5) for pid in marker.read_text().split())


def test_a_helper_cannot_write_into_results_after_the_workflow(tmp_path):
    marker = tmp_path / "helper.pid"
    target = tmp_path / "wf" / "results" / "w" / "stages.csv"  # where _workflow puts the run
    args = {"marker": str(marker), "new_session": True, "append_to": str(target)}
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:helper_process", "args": args}])
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    before = target.read_text()
    time.sleep(6)  # the helper would have appended after 4 s
    assert target.read_text() == before and "corrupted" not in before


def test_a_workload_that_changes_directory_writes_its_outputs_where_the_job_asked(tmp_path):
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:chdir_away", "args": {"to": str(tmp_path)}}])
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    assert (wf / "results" / "w" / "manifest.json").exists() and not (tmp_path / "results").exists()


# --- inputs that are each plausible but disagree: refused, naming the file and the fix --------------------------------

V3 = DATA / "h200_v3" / "default"  # the default decoder on the H200: timeline, plan, capture, count, ceilings


def _rows(path):
    return list(csv.reader(path.open()))


def _write_rows(path, rows):
    with path.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)


def _v3(tmp_path, **edits):
    """A copy of the recorded run; ``edits``: file name -> function editing that file (a Path) in place."""
    d = tmp_path / "run"
    shutil.copytree(V3, d)
    for name, edit in edits.items():
        edit(d / name)
    return d


def _aggregate(d):
    record = CaptureRecord.read(d / "capture.cmd.json")
    return aggregate_recorded(d, manifest_json=d / "manifest.json", capture_record=record)


def _swap_columns(a, b, units=False):
    def edit(path):
        rows = _rows(path)
        i, j = rows[0].index(a), rows[0].index(b)
        rows[0][i], rows[0][j] = rows[0][j], rows[0][i]
        if units:
            rows[1][i], rows[1][j] = rows[1][j], rows[1][i]
        _write_rows(path, rows)

    return edit


def test_the_recorded_run_itself_passes_every_check(tmp_path):
    st = _aggregate(_v3(tmp_path)).stages.set_index("stage")
    assert (st["coverage"] == 1.0).all() and st.loc["prefill", "flops_tensor_measured"] > 0


def test_a_dram_and_an_l2_byte_column_exchanged_are_refused(tmp_path):
    # Both count bytes, so their units agree; DRAM then read 3x its bytes (DRAM use 86% instead of 20.5%).
    d = _v3(tmp_path, **{"capture.raw.csv": _swap_columns("dram__bytes_read.sum", "lts__t_bytes.sum")})
    with pytest.raises(ValueError, match=r"capture.raw.csv: result ID \d+: .* DRAM bytes but .* L2 bytes"):
        _aggregate(d)


def test_a_time_column_and_a_byte_column_swapped_are_refused(tmp_path):
    # The header's names swapped, the units row left: nanoseconds would have been read as bytes (DRAM x0.03).
    d = _v3(tmp_path, **{"capture.raw.csv": _swap_columns("gpu__time_duration.sum", "dram__bytes_read.sum")})
    with pytest.raises(ValueError, match=r"capture.raw.csv: column 'gpu__time_duration.sum' counts time but its unit"):
        _aggregate(d)
    # Names and units swapped together: each column looks right alone; against nsys's durations of the same
    # launches, the 'durations' are bytes.
    d = _v3(
        tmp_path / "b", **{"capture.raw.csv": _swap_columns("gpu__time_duration.sum", "dram__bytes_read.sum", True)}
    )
    with pytest.raises(checks.InconsistentInputs, match=r"capture.raw.csv: ncu's kernel durations .* the timeline's"):
        _aggregate(d)


def test_a_negative_counter_cell_and_a_duplicated_result_are_refused(tmp_path):
    def negative(path):
        rows = _rows(path)
        col = rows[0].index("dram__bytes_read.sum")
        rows[5][col] = "-" + rows[5][col]
        _write_rows(path, rows)

    d = _v3(tmp_path, **{"capture.raw.csv": negative})
    rid = _rows(d / "capture.raw.csv")[5][0]
    with pytest.raises(ValueError, match=rf"result ID {rid}, column 'dram__bytes_read.sum': .* is negative"):
        _aggregate(d)

    def duplicate(path):
        rows = _rows(path)
        _write_rows(path, rows + [rows[7]])

    d = _v3(tmp_path / "b", **{"capture.raw.csv": duplicate})
    with pytest.raises(ValueError, match=r"result ID\(s\) \['.+'\] appear more than once"):
        _aggregate(d)

    def not_a_number(path):  # was pandas' own ValueError, naming neither the file nor the cell
        rows = _rows(path)
        rows[4][0] = rows[4][0] + "a"
        _write_rows(path, rows)

    d = _v3(tmp_path / "c", **{"capture.raw.csv": not_a_number})
    with pytest.raises(ValueError, match=r"capture.raw.csv: result ID\(s\) \['\d+a'\] are not numbers"):
        _aggregate(d)


def test_an_analytic_count_of_another_configuration_is_refused(tmp_path):
    # Another run's count: 4 decode steps (h200_v2/small), where this run made 8.
    d = _v3(tmp_path, **{"analytic_flops.json": lambda p: shutil.copy(DATA / "h200_v2/small/analytic_flops.json", p)})
    with pytest.raises(checks.InconsistentInputs, match=r"analytic_flops.json: steps per stage .*'decode': \(4, 8\)"):
        _aggregate(d)

    # Same stages and steps, but the count of a batch twice as large: the GEMMs measured half the model's FLOPs,
    # though every launch was counted in the one precision the operators used.
    def doubled(path):
        data = json.loads(path.read_text())
        for s in data["stages"].values():
            for key in ("flops", "flops_causal_adjusted"):
                s[key] *= 2
            s["by_class"] = {k: v * 2 for k, v in s["by_class"].items()}
        path.write_text(json.dumps(data))

    d = _v3(tmp_path / "b", **{"analytic_flops.json": doubled})
    with pytest.raises(checks.InconsistentInputs, match=r"the GEMM kernels executed .* of the model's"):
        _aggregate(d)


def test_operator_calls_of_the_count_and_of_the_timeline_must_agree(tmp_path):
    # The timeline's probe pass marked every operator call with an NVTX range; plain SQL counts them per stage.
    con = sqlite3.connect(V3 / "timeline.sqlite")
    rows = con.execute(
        'SELECT s.value, COUNT(*) FROM NVTX_EVENTS o JOIN NVTX_EVENTS step ON o.start BETWEEN step.start AND step."end"'
        " JOIN NVTX_EVENTS dop ON dop.eventType = 75 AND dop.text = 'nsightflow.ops' AND o.domainId = dop.domainId"
        " JOIN NVTX_EVENTS dst ON dst.eventType = 75 AND dst.text = 'nsightflow.probe' AND step.domainId = dst.domainId"
        " LEFT JOIN StringIds s ON s.id = step.textId WHERE o.eventType = 59 AND step.eventType = 59 GROUP BY s.value"
    ).fetchall()
    calls = {stage or "": n for stage, n in rows}
    assert set(calls) == {"prefill", "decode"}

    def with_calls(extra):
        def edit(path):
            data = json.loads(path.read_text())
            for stage, n in calls.items():
                data["stages"][stage]["calls"] = n + (extra if stage == "decode" else 0)
            path.write_text(json.dumps(data))

        return edit

    _aggregate(_v3(tmp_path, **{"analytic_flops.json": with_calls(0)}))
    with pytest.raises(checks.InconsistentInputs, match=rf"stage 'decode' counted {calls['decode'] + 1} operator"):
        _aggregate(_v3(tmp_path / "b", **{"analytic_flops.json": with_calls(1)}))


def test_kernels_of_one_stream_overlapping_in_time_are_refused(tmp_path):
    def doubled_kernels(path):  # prefill's kernels entered twice (a merged or edited export)
        con = sqlite3.connect(path)
        cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        prefill = con.execute(
            'SELECT MIN(start), MAX("end") FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value = '
            "'prefill' AND n.eventType = 59"
        ).fetchone()
        keep = ",".join(c for c in cols if c != "correlationId")
        con.execute(
            f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({keep}, correlationId) SELECT {keep}, correlationId FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL WHERE start BETWEEN ? AND ?",
            prefill,
        )
        con.commit()
        con.close()

    d = _v3(tmp_path, **{"timeline.sqlite": doubled_kernels})
    with pytest.raises(
        checks.InconsistentInputs, match=r"timeline.sqlite: stage 'prefill', stream \d+: a kernel starts"
    ):
        _aggregate(d)


@pytest.mark.parametrize(
    ("column", "factor", "what"),
    [
        # Tensor FLOPs doubled: the recorded prefill GEMM ran at 0.79 of the bf16 peak its row's cells give.
        ("sm__ops_path_tensor_src_bf16_dst_fp32.sum", 2, "tensor FLOPs"),
        # L2 bytes x3: a kernel moved 0.43 of L2's peak.
        ("lts__t_bytes.sum", 3, "L2 bytes"),
    ],
)
def test_a_result_doing_more_than_its_device_can_is_refused(tmp_path, column, factor, what):
    d = _v3(tmp_path, **{"capture.raw.csv": _scale_column(column, factor)})
    with pytest.raises(checks.InconsistentInputs, match=rf"capture.raw.csv: result ID \d+ .* its {what} need"):
        _aggregate(d)


@pytest.mark.parametrize("cache_control", ["all", "none"])
def test_dram_counters_a_thousand_times_low_under_flushed_caches_are_refused(tmp_path, cache_control):
    """Every DRAM byte cell /1000 with the unit row still 'byte' (an export in kB read as bytes): the recorded run's
    DRAM/L2 ratio, 0.348, reads 0.00035. With flushed caches each kernel must read its inputs from DRAM; without,
    data that fits in L2 need not, so the run is then analysed as it is."""

    def thousandth(path):
        for col in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
            _scale_column(col, 1e-3)(path)

    def cache(path):
        rec = json.loads(path.read_text())
        rec["argv"] = [
            f"--cache-control={cache_control}" if a.startswith("--cache-control") else a for a in rec["argv"]
        ]
        path.write_text(json.dumps(rec))

    d = _v3(tmp_path / "edited", **{"capture.raw.csv": thousandth, "capture.cmd.json": cache})
    if cache_control == "none":
        st = _aggregate(d).stages.set_index("stage")
        as_recorded = _aggregate(_v3(tmp_path / "recorded")).stages.set_index("stage")
        want = as_recorded["dram_bytes_measured"] / 1000  # analysed as exported: the edit's thousandth, no more
        assert st["dram_bytes_measured"].to_numpy() == pytest.approx(want.to_numpy(), rel=1e-9)
    else:
        with pytest.raises(checks.InconsistentInputs, match=r"capture.raw.csv: its 72 results moved .* DRAM bytes"):
            _aggregate(d)


@pytest.mark.parametrize(
    ("factor", "needle"),
    [
        # Halved: nothing overlaps, but ncu's replay of the same launches now takes 2.6x the timeline's time.
        (0.5, r"capture.raw.csv: ncu's kernel durations .* sum to 2.5\dx the timeline's"),
        # x1.3: within ncu's band (1.0x), but kernels that ran back to back now overlap on their stream.
        (1.3, r"timeline.sqlite: stage '\w+', stream \d+: a kernel starts .* durations were scaled"),
        (2.0, r"capture.raw.csv: ncu's kernel durations .* sum to 0.6\dx the timeline's"),
    ],
)
def test_every_kernels_duration_scaled_in_the_timeline_is_refused(tmp_path, factor, needle):
    """The recorded run's ratio of ncu's time to the timeline's is 1.28 (summed over its 72 results): scaled by
    the factor, it reads 1.28/factor; the timeline's own streams say the rest."""

    def scaled(path):
        con = sqlite3.connect(path)
        scale = f'CAST({factor} * ("end" - start) AS INTEGER)'
        con.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + {scale}')
        con.commit()
        con.close()

    with pytest.raises(checks.InconsistentInputs, match=needle):
        _aggregate(_v3(tmp_path, **{"timeline.sqlite": scaled}))


def _edit_kernels(sql):
    def edit(path):
        con = sqlite3.connect(path)
        cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        con.execute(sql.format(keep=",".join(c for c in cols if c not in ("streamId",))))
        con.commit()
        con.close()

    return edit


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        # every kernel's record copied onto another stream: busy time doubled, coverage halved
        (
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({keep}, streamId) SELECT {keep}, streamId + 1000 FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL",
            r"kernel record\(s\) appear on two streams with the same start and end",
        ),
        # kernels of zero duration: busy 0, the stage called launch-bound
        ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start', r"kernel record\(s\) end when they start or before"),
    ],
)
def test_kernel_records_copied_or_without_duration_are_refused(tmp_path, sql, needle):
    d = _v3(tmp_path, **{"timeline.sqlite": _edit_kernels(sql)})
    with pytest.raises(checks.InconsistentInputs, match=rf"timeline.sqlite: stage '\w+': \d+ {needle}"):
        _aggregate(d)


def test_a_command_with_an_empty_batch_moves_and_computes_nothing(tmp_path):
    """A batch of none: its products read no weight and compute nothing, so no bandwidth or compute use is rated
    (before: the weights counted as bytes touched gave "602% of peak", bound "memory")."""
    cmd = ["python3", "examples/nvtx_program.py", "--steps", "2", "--batch", "0"]
    wf, env = _workflow(tmp_path, [{"name": "empty", "command": cmd, "domain": "LLM"}], profiler="torch")
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    st = pd.read_csv(wf / "results" / "empty" / "stages.csv").set_index("stage")
    assert (st["bytes_analytic"] == 0).all() and (st["flops_analytic"] == 0).all()
    assert not st["bound"].isin(["memory", "compute"]).any(), st[["bound", "bound_why"]]


def test_integer_matmuls_get_no_float_peak(tmp_path):
    out = tmp_path / "run.json"
    argv = [
        sys.executable,
        "-m",
        "nsightflow.capture.inside.harness",
        "--callable",
        "workloads:int_matmuls",
        "--mode",
        "flops",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    subprocess.run([*argv, "--out", str(out)], check=True, env=env, capture_output=True)
    run = json.loads(out.read_text())
    assert run["analytic"]["stages"]["mm"]["by_precision"] == {"int64": 2 * 16**3}
    assert (run["precision"], run["precision_level"]) == ("unknown", "warning") and "int64" in run["precision_why"]
    pk = peaks.ceiling_peaks(
        Ceilings(
            device="cpu",
            dtype="float32",
            device_name="cpu",
            matmul_flops_per_s=1e9,
            copy_bytes_per_s=1e9,
            method={"matmul": "m", "copy": "c"},
            precision="fp32",
        ),
        "unknown",
    )
    assert np.isnan(pk.compute) and pk.compute_source.startswith("unknown")


# --- the documented analysis modes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stats-only", "timeline-only"])
def test_documented_analysis_modes_report(tmp_path, mode):
    caps = tmp_path / "caps"
    caps.mkdir()
    if mode == "stats-only":  # nsys stats CSVs alone: times only
        for f in (DATA / "h200_tinyllm" / "stats").glob("*.csv"):
            shutil.copy(f, caps / f.name)
    else:  # the SQLite export and the analytic count, no ncu results (h200_v2/default minus its export)
        for f in ("timeline.sqlite", "analytic_flops.json"):
            shutil.copy(DATA / "h200_v2" / "default" / f, caps / f)
    wf = copy_workflow(tmp_path / "wf")
    snakemake(wf, "--cores", "1", "results/report.html", "--config", f"captures={caps}")
    run = wf / "results" / "captures" / "caps"
    st = pd.read_csv(run / "stages.csv").set_index("stage")
    assert (st["wall_ms"] > 0).all() and (st["gpu_busy_ms"] > 0).all()
    # No counters, nothing that says the GEMMs' precision: no compute peak, so no MFU (never a float32 peak
    # under bf16 work, which put MFU at 342%).
    assert st["mfu_busy"].isna().all()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["peaks"]["compute_source"].startswith("unknown")
    assert "<h3>Stages</h3>" in (run / "report.html").read_text()


# --- names and config -----------------------------------------------------------------------------------------------


def test_stage_names_that_read_like_values_stay_names(tmp_path):
    names = ["NA", "nan", "1", "True"]
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:named_stages", "args": {"names": names}}])
    snakemake(wf, "--cores", "1", "results/report.html", env=env)
    st = runfiles.read_table(wf / "results" / "w" / "stages.csv")
    assert st["stage"].tolist() == names
    page = (wf / "results" / "w" / "report.html").read_text()
    assert all(f"<td class='label'>{n}</td>" in page for n in names)


@pytest.mark.parametrize(
    "workload,message",
    [
        (
            {"name": "w", "callable": "nsightflow.workloads.decoder:build", "sweep": {"dtype": ["bfloat16", "bf16"]}},
            "workloads[0] (w).sweep.dtype[1]: 'bf16' is not a dtype",
        ),
        (
            {"name": "w" * 230, "callable": "nsightflow.workloads.decoder:build"},
            "over the 200 a file system takes",
        ),
    ],
    ids=["second-swept-dtype", "long-name"],
)
def test_every_sweep_value_and_name_is_checked_before_any_job(tmp_path, workload, message):
    wf, env = _workflow(tmp_path, [workload])
    proc = snakemake(wf, "--cores", "1", "results/report.html", check=False, env=env)
    assert proc.returncode != 0 and message in proc.stdout, proc.stdout[-2000:]
    assert not (wf / "results").exists()


def test_a_large_sweep_is_said_before_it_runs(tmp_path):
    wl = {"name": "w", "callable": "nsightflow.workloads.decoder:build", "sweep": {"batch": list(range(1, 151))}}
    wf, env = _workflow(tmp_path, [wl])
    out = snakemake(wf, "-n", "--cores", "1", "results/report.html", env=env).stdout
    assert "the config's sweeps make 150 runs, about 451 jobs on the torch backend (more than sweep_warn: 100)" in out
    # The estimate is the dry run's own count (150 profiles, aggregations and run pages, and the index page).
    assert re.search(r"^total\s+451$", out, re.M), out[-1500:]


@pytest.mark.parametrize("size", ["batch", "prompt", "n_layers"])
def test_degenerate_workload_sizes_are_refused_when_built(tmp_path, size):
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "nsightflow.workloads.decoder:build", "args": {size: 0}}])
    proc = snakemake(wf, "--cores", "1", "results/report.html", check=False, env=env)
    assert proc.returncode != 0 and f"sizes {size}=0: each must be a whole number of 1 or more" in proc.stdout


def test_a_workload_printing_40_mb_gets_a_bounded_log(tmp_path):
    wf, env = _workflow(tmp_path, [{"name": "w", "callable": "workloads:chatty", "args": {"megabytes": 40}}])
    snakemake(wf, "--cores", "1", "results/w/stages.csv", env=env)
    log = wf / "results" / "w" / "logs" / "torch_profile.log"
    text = log.read_text()
    # Four passes print 160 MB; the log keeps 4 MB of it, its start and end, and says what it left out.
    assert log.stat().st_size < 5 << 20
    assert "bytes of output left out here (the log keeps its start and end)" in text
    assert text.split("\n[nsightflow] the job took")[0].rstrip().endswith("exited with 0")  # then the job's time


def test_a_failed_job_leaves_no_staging_file(tmp_path):
    from nsightflow import files
    from nsightflow.rules.rulejob import rule_job

    out = tmp_path / "run" / "summary.json"
    tool = tmp_path / "run" / "timeline" / "timeline.nsys-rep"
    with pytest.raises(OSError, match="No space left"):
        with rule_job(tmp_path / "job.log", [out, tool]):
            files.staging(out).write_text('{"half": ')  # a write cut short by a full disk
            files.staging(tool).parent.mkdir(parents=True, exist_ok=True)
            tool.with_name("timeline.tmp.nsys-rep").write_text("partial")  # the tool's own staging name
            raise OSError(28, "No space left on device")
    assert sorted(p.name for p in (tmp_path / "run").rglob("*") if p.is_file()) == []
    assert "the job failed: OSError" in (tmp_path / "job.log").read_text()


def _scale_column(name, factor, unit=None):
    def edit(path):
        rows = _rows(path)
        i = rows[0].index(name)
        for r in rows[2:]:
            if r[i].strip():
                r[i] = repr(float(r[i].replace(",", "")) * factor)
        if unit is not None:
            rows[1][i] = unit
        _write_rows(path, rows)

    return edit


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        # The SM clock's unit changed: every cell read 1000x (the compute peak x1000, MFU /1000).
        (_scale_column("sm__cycles_elapsed.avg.per_second", 1, "Khz"), "bf16 compute"),
        # The dense bf16 peak counter doubled: 2.1 PFLOP/s on an H200 whose datasheet says 0.99.
        (
            _scale_column("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained", 2),
            "bf16 compute",
        ),
        # DRAM's peak bytes per cycle a tenth: the bandwidth use 10x.
        (_scale_column("dram__bytes.sum.peak_sustained", 0.1), "DRAM bandwidth"),
    ],
)
def test_a_peak_no_device_of_that_name_has_is_refused(tmp_path, edit, what):
    d = _v3(tmp_path, **{"capture.raw.csv": edit})
    with pytest.raises(
        checks.InconsistentInputs,
        match=rf"capture.raw.csv: the {what} peak from ncu's cells .*x the NVIDIA H200 datasheet",
    ):
        _aggregate(d)


@pytest.mark.parametrize("factor", [1, 2])
def test_an_analytic_count_among_captures_must_agree_with_their_counters(tmp_path, factor):
    """A captures folder (no plan, no probe): with every tensor precision and the FLOPs outside the tensor pipes
    collected, GEMMs that executed half the model's FLOPs mean the count is of another configuration."""
    from nsightflow.analysis.captures import aggregate_captures
    from nsightflow.capture.launch.imported import import_captures

    caps = tmp_path / "caps"
    caps.mkdir()
    src = DATA / "h200_v2" / "default"
    for f in ("timeline.sqlite", "capture.raw.csv"):
        shutil.copy(src / f, caps / f)
    data = json.loads((src / "analytic_flops.json").read_text())
    for s in data["stages"].values():
        for key in ("flops", "flops_causal_adjusted"):
            s[key] *= factor
        s["by_class"] = {k: v * factor for k, v in s["by_class"].items()}
    (caps / "analytic_flops.json").write_text(json.dumps(data))
    import_captures(caps, tmp_path / "imported")
    if factor == 1:
        st = aggregate_captures(tmp_path / "imported", EVERY_CLASS).stages.set_index("stage")
        got = st[["flops_measured_gemm", "flops_measured_unattributed"]].fillna(0).sum(axis=1)
        assert (got >= 0.9 * st["flops_analytic_gemm"]).all()
    else:
        with pytest.raises(checks.InconsistentInputs, match=r"analytic_flops.json: stage .* the GEMM kernels executed"):
            aggregate_captures(tmp_path / "imported", EVERY_CLASS)
