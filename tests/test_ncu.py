"""The ncu command, its diagnosis, and raw-CSV parsing, on real exports and logs from the GPU host."""

import csv
import io
import re
from pathlib import Path

import pytest
from conftest import DATA

from nsightflow import ncu_metrics
from nsightflow.capture.inside.progress import LaunchProgress
from nsightflow.capture.launch import ncu
from nsightflow.capture.read import ncu_csv
from nsightflow.records import AnalyticCounts

D = DATA / "h200_tinyllm"


def test_parse_raw_csv_real_export():
    df, units = ncu_csv.parse_raw_csv(D / "decode.step3.raw.csv")
    raw = list(csv.reader((D / "decode.step3.raw.csv").open()))
    assert len(df) == len(raw) - 2 == 136
    assert units["gpu__time_duration.sum"] == "ns"
    col = raw[0].index("dram__bytes_read.sum")
    assert df["dram__bytes_read.sum"].tolist() == [float(r[col].replace(",", "")) for r in raw[2:]]
    assert df["dram__bytes.sum.peak_sustained"].iloc[0] == 1504.0  # printed "1,504"
    # The harness marks each decode step with its index as the NVTX payload.
    assert set(df["nvtx_range"]) == {"decode"} and set(df["nvtx_payload"]) == {3}
    assert set(df["nvtx_domain"]) == {"nsightflow"}


def test_parse_nvtx_with_at_sign_range():
    df, _ = ncu_csv.parse_raw_csv(D / "at_range.raw.csv")
    assert set(df["nvtx_domain"]) == {"LLM"}
    assert set(df["nvtx_range"]) == {"LLM@prefill"}
    assert sorted(set(df["nvtx_payload"])) == [0, 1]


def test_parse_raw_csv_rejects_bad_input(tmp_path):
    good = (D / "decode.step3.raw.csv").read_text().splitlines()
    (tmp_path / "trunc.csv").write_text("\n".join(good[:3] + [good[3][: len(good[3]) // 2]]) + "\n")
    with pytest.raises(ValueError, match="truncated"):
        ncu_csv.parse_raw_csv(tmp_path / "trunc.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="not an ncu raw CSV"):
        ncu_csv.parse_raw_csv(tmp_path / "empty.csv")
    (tmp_path / "other.csv").write_text((D / "stats" / "nvtx_sum.csv").read_text())
    with pytest.raises(ValueError, match="--page raw --csv"):
        ncu_csv.parse_raw_csv(tmp_path / "other.csv")


def test_units_scale_to_base_and_unknown_units_fail_only_where_read():
    assert ncu_csv.unit_factor("Mbyte") == (1e6, False) and ncu_csv.unit_factor("usecond") == (1e-6, True)
    assert ncu_csv.unit_factor("cycle/nsecond") == (1e9, False) and ncu_csv.unit_factor("byte/cycle") == (1.0, False)
    assert ncu_csv.unit_factor("frobs") is None
    rows = list(csv.reader((D / "prefill.raw.csv").open()))
    i = rows[0].index("dram__bytes_read.sum")
    rows[1][i] = "Kbyte"  # as auto units print it: the same cells now mean thousands of bytes
    rows[1][rows[0].index("lts__t_bytes.sum")] = "Kbyte"  # (L2's too: DRAM bytes above L2's are refused)
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
    df, _ = ncu_csv.parse_raw_csv(text.getvalue())
    assert df["dram__bytes_read.sum"].iloc[0] == 1000 * float(rows[2][i].replace(",", ""))
    rows[1][i] = "frobs"
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
    with pytest.raises(ValueError, match="print-units base"):
        ncu_csv.parse_raw_csv(text.getvalue())


def test_auto_unit_export_matches_the_base_unit_export():
    # One real report exported both ways on the GPU host; auto units print 'us', 'Mbyte', 'Ghz', ...
    A = DATA / "h200_autounits"
    auto, units = ncu_csv.parse_raw_csv(A / "prefill.auto.raw.csv")
    base, _ = ncu_csv.parse_raw_csv(A / "prefill.base.raw.csv")
    assert units["gpu__time_duration.sum"] == "us" and units["dram__bytes_read.sum"] == "Mbyte"
    rows = list(csv.reader((A / "prefill.base.raw.csv").open()))
    for metric in (
        "gpu__time_duration.sum",
        "dram__bytes_read.sum",
        "sm__cycles_elapsed.avg.per_second",
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
        "lts__t_bytes.sum",
    ):
        i = rows[0].index(metric)
        cells = [float(r[i].replace(",", "")) for r in rows[2:]]
        assert auto[metric].tolist() == pytest.approx(cells, rel=5e-3), metric  # auto units round to ~4 digits
        assert base[metric].tolist() == cells


def test_check_capture_diagnoses_real_failures():
    empty = (D / "ncu_no_kernels.log").read_text()
    with pytest.raises(ncu.CaptureError) as err:
        ncu.check_capture(empty, 0, what="the plan's windows")
    assert "No kernels were profiled" in str(err.value) and "never opened a profiler window" in str(err.value)
    refused = (D / "ncu_range_replay_decode.log").read_text()
    with pytest.raises(ncu.CaptureError, match="app-range"):
        ncu.check_capture(refused, 9, what="decode")
    ncu.check_capture('==PROF== Profiling "k": 100%\n', 0, what="x", expected=1)


def test_a_capture_that_does_not_match_its_plan_is_refused():
    F = DATA / "h200_tinyllm_filtered"
    # A real log of 63 profiled launches (exit code 0): refused when the plan names another number.
    log = (F / "ncu_demangled_filter_prefill.log").read_text()
    assert ncu.profiled_count(log) == 63
    for planned in (79, 62):
        with pytest.raises(ncu.CaptureError, match=f"profiled 63 launches for prefill, the plan names {planned}"):
            ncu.check_capture(log, 0, what="prefill", expected=planned)
    ncu.check_capture(log, 0, what="prefill", expected=63)  # as planned: accepted


def test_capture_argv_windows_the_whole_program():
    settings = {"clock_control": "none", "cache_control": "all"}  # config/config.yaml's values
    argv = ncu.capture_argv(
        "ncu", "out/c", ["python", "-m", "m"], metrics=["m1", "m2"], replay_mode="kernel", **settings
    )
    assert argv[argv.index("--profile-from-start") + 1] == "off"
    assert "--clock-control=none" in argv and argv[-3:] == ["python", "-m", "m"]
    assert not any(a.startswith(("--nvtx-include", "--launch-skip", "--launch-count")) for a in argv)
    # the one kernel filter: every kernel but NCCL's (a replayed collective would deadlock the other ranks)
    assert argv[argv.index("--kernel-name") + 1] == "regex:^(?!nccl)" and argv.count("--kernel-name") == 1
    assert argv[argv.index("--metrics") + 1] == "m1,m2"
    # Range replay refuses --profile-from-start and SASS instruction counts.
    ranges = ncu.capture_argv("ncu", "o", ["p"], replay_mode="app-range", **settings)
    assert "--profile-from-start" not in ranges and "--replay-mode=app-range" in ranges
    every = ncu_metrics.ALL_PRECISIONS
    metrics = ncu_metrics.resolve_metrics("default", ["x.sum"], every, ranges=True)
    assert metrics[-1] == "x.sum" and not any("__sass_" in m for m in metrics)
    assert set(ncu_metrics.resolve_metrics("default", [], every)) == set(ncu_metrics.DEFAULT_METRICS)
    assert ncu_metrics.resolve_metrics(["a.sum", "a.sum"], ["b.sum"], ["bf16"]) == ["a.sum", "b.sum"]


def test_flop_counters_follow_the_operators_the_probe_saw():
    analytic = AnalyticCounts.from_dict(
        {
            "stages": {
                "prefill": {"tensor_precisions": ["bf16"], "not_counted": []},
                "decode": {"tensor_precisions": ["bf16", "tf32"], "not_counted": []},
                "graph": {
                    "tensor_precisions": None,
                    "not_counted": ["the stage replays CUDA graphs"],
                    "graph_replays": 4,
                },
                "failed": {"tensor_precisions": None, "not_counted": ["a FLOP formula failed"]},
                "int": {"tensor_precisions": ["int8"], "not_counted": []},
                "simt": {"tensor_precisions": ["fp32"], "not_counted": []},
            }
        }
    )

    def seen(*launches):
        return ncu_metrics.seen_precisions(analytic, [(*launch, "", "") for launch in launches])[0]

    assert seen(("prefill", 1), ("prefill", 3)) == ["bf16"]
    assert seen(("prefill", 1), ("decode", 1)) == ["bf16", "tf32"]
    # A whole-step window (compiled code runs eagerly in the counting pass): the stage's count.
    assert seen(("prefill", -1)) == ["bf16"]
    # its launches are keyed by their kernels (no operator launched them): a GEMM among them takes the stage's count
    # too (the compiled command's and gpt-fast's captures on the H200 took it for an operator without a formula)
    gemm = "nvjet_sm90_tst_72x64_64x12_4x1_v_bz_TNN"
    assert ncu_metrics.seen_precisions(analytic, [("prefill", -1, gemm, gemm)])[0] == ["bf16"]
    assert ncu_metrics.seen_precisions(analytic, [("prefill", 1, gemm, gemm)])[0] is None  # an operator's: unknown
    # A replayed CUDA graph: what the operators run eagerly ran in (every counted stage's).
    got, how = ncu_metrics.seen_precisions(analytic, [("prefill", 1, "", ""), ("graph", 0, "", "")])
    assert got == ["bf16", "fp32", "int8", "tf32"] and any("replays CUDA graphs" in h for h in how)
    # A launch between operators of an eagerly run stage (an extension's kernel), a failed count: nobody can tell.
    assert seen(("prefill", 1), ("prefill", 4)) is None
    assert seen(("failed", -1)) is None and seen(("failed", 1)) is None and seen(("missing", 1)) is None
    # Tensor precisions: those seen; every one where unknown or where ncu has no counter for one seen (int8).
    assert ncu_metrics.tensor_precisions("auto", ["bf16"]) == ["bf16"]
    assert ncu_metrics.tensor_precisions("auto", ["bf16", "fp32"]) == ["bf16"]
    # none seen (float32 on the FMA units, or no GEMM): TF32's counter, so tensor FLOPs are measured, not unknown
    assert ncu_metrics.tensor_precisions("auto", ["fp32"]) == ncu_metrics.tensor_precisions("auto", []) == ["tf32"]
    for unknown in (None, ["int8"]):
        assert ncu_metrics.tensor_precisions("auto", unknown) == ncu_metrics.ALL_PRECISIONS
    assert ncu_metrics.tensor_precisions("all", ["bf16"]) == ncu_metrics.ALL_PRECISIONS
    assert ncu_metrics.tensor_precisions(["fp16", "bf16"], None) == ["bf16", "fp16"]
    with pytest.raises(ValueError, match="fp4"):
        ncu_metrics.tensor_precisions(["fp4"], None)
    # Non-tensor FLOPs (SASS counts): where a GEMM runs on the FMA units, or nothing is known.
    assert ncu_metrics.non_tensor_flops("auto", ["bf16"]) is False
    assert ncu_metrics.non_tensor_flops("auto", ["bf16", "fp32"]) is True
    assert ncu_metrics.non_tensor_flops("auto", None) is True and ncu_metrics.non_tensor_flops("auto", ["int8"]) is True
    assert ncu_metrics.non_tensor_flops(True, ["bf16"]) is True and ncu_metrics.non_tensor_flops(False, None) is False
    # ... for a material share of a stage's FLOPs: a Llama's float32 rotary matmul (16,384 of 1.15e11) is not
    llama = {"stages": {"prefill": {"flops": 1.15e11, "by_precision": {"bf16": 1.15e11 - 16384, "fp32": 16384}}}}
    share = ncu_metrics.simt_share(AnalyticCounts.from_dict(llama), ["prefill"])
    assert share == pytest.approx(16384 / 1.15e11)
    assert ncu_metrics.non_tensor_flops("auto", ["bf16", "fp32"], share) is False
    head = {"stages": {"a": {"flops": 1e9, "by_precision": {"fp32": 1e7}}, "b": {"flops": 1e9, "by_precision": {}}}}
    assert ncu_metrics.simt_share(AnalyticCounts.from_dict(head), ["a", "b"]) == pytest.approx(
        0.01
    )  # the largest stage share decides
    assert ncu_metrics.non_tensor_flops("auto", ["bf16", "fp32"], 0.01) is True
    assert (
        ncu_metrics.simt_share(AnalyticCounts.from_dict({"stages": {"a": {"flops": 1e9}}}), ["a"]) is None
    )  # not said: counts as material
    # A stage without analytic FLOPs (an optimizer step: elementwise work only) runs no FMA-unit GEMM.
    train = {"stages": {**llama["stages"], "optimizer": {"flops": 0, "by_precision": {}}}}
    assert ncu_metrics.simt_share(AnalyticCounts.from_dict(train), ["prefill", "optimizer"]) == pytest.approx(
        16384 / 1.15e11
    )
    bf16 = ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=False)
    assert [m for m in bf16 if m.startswith("sm__ops_path_tensor_src")] == ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
    others = {ncu_metrics.TENSOR_FLOP_METRICS[p] for p in ncu_metrics.ALL_PRECISIONS if p != "bf16"}
    assert set(bf16) == {m for m in ncu_metrics.DEFAULT_METRICS if "__sass_" not in m} - others
    assert (
        set(ncu_metrics.resolve_metrics("default", [], ["bf16"], non_tensor=True))
        == set(ncu_metrics.DEFAULT_METRICS) - others
    )


def test_reference_capture_profiles_every_launch_of_the_named_stages():
    argv = ncu.reference_argv("ncu", "out/all", "nsightflow", ["prefill", "decode"], ["a.sum", "b.sum"], ["python"])
    assert argv == [
        "ncu",
        "--force-overwrite",
        "--export",
        "out/all",
        "--nvtx",
        "--kernel-name",
        "regex:^(?!nccl)",
        "--nvtx-include",
        "nsightflow@prefill/",
        "--nvtx-include",
        "nsightflow@decode/",
        "--clock-control=none",
        "--cache-control=all",
        "--metrics",
        "a.sum,b.sum",
        "python",
    ]


def test_ncu_messages_after_a_programs_unended_line_are_counted():
    # A real capture of two ranks (tests/data/h100_ranks_output): a rank's line without its end put one of ncu's
    # "==PROF== Profiling" messages mid-line. The plan asked for 4 + 7 launches (the log's own first lines); ncu
    # profiled ids 0 to 10.
    log = (DATA / "h100_ranks_output" / "ncu_capture.log").read_text()
    planned = sum(int(re.search(r"; profiling (\d+) ", line).group(1)) for line in log.splitlines()[:2])
    assert planned == 11
    assert ncu.profiled_count(log) == planned
    ncu.check_capture(log, 0, what="the plan's windows", expected=planned)  # accepted: no error
    progress = LaunchProgress("ncu tp1", [{"stage": "s", "step": 0}] * planned, every_s=3600.0, stream=io.StringIO())
    for line in log.splitlines():
        progress(line)
    assert progress.done == planned


def _awaiting_launch(tmp_path):
    """The harness as ncu's first launch runs it when its plan is made meanwhile (HarnessCall.windowed with
    await_plan), on a CPU workload that logs each pass: one warm-up pass, then the windowed pass."""
    import os
    from pathlib import Path

    from nsightflow.capture.inside.harness import HarnessCall

    passes, plan = tmp_path / "passes.txt", tmp_path / "plan.json"
    call = HarnessCall("workloads:pass_log", {"path": str(passes)}, warmup=1)
    launch = call.windowed(plan, await_plan=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    return launch, env, passes, plan


def _passes(path):
    return path.read_text().count("pass") if path.exists() else 0


def _plan(path):
    from nsightflow.capture.read.plan import CapturePlan, StagePlan, Window

    window = Window("step", 1, [1], "the step's only operator")
    alone = StagePlan(steps=1, sampled_steps=[0], extra_steps=[], structures=1, launches=1, comm_launches=0)
    plan = CapturePlan("representatives", "nsightflow", [window], [], {"step": alone})
    plan.write(path)
    return plan


@pytest.mark.parametrize("outcome", ["same", "other counters", "plan fails"])
def test_the_plan_is_made_while_the_program_starts_and_a_launch_it_disowns_is_stopped(tmp_path, outcome):
    # What ncu_capture does with its first launch (no ncu on the CPU: the harness's launch itself, through run_tool as
    # ncu's would run): the plan is made beside the launch, whose program warms up and then waits for the plan; a plan
    # asking for another command line (other FLOP counters) stops the launch before its windowed pass, and so does a
    # plan that cannot be made, whose error is the job's.
    import os
    import time

    from nsightflow.capture.launch.ncu_capture import _Planner, _Replan
    from nsightflow.capture.launch.ncu_inputs import Counters
    from nsightflow.capture.launch.tools import run_tool
    from nsightflow.errors import InputError

    launch, env, passes, plan = _awaiting_launch(tmp_path)
    assert launch.awaits_plan and "--await-windows" in launch.argv
    bf16 = Counters(["bf16"], False, ["bf16"])
    seen = {}

    def make(path):
        deadline = time.monotonic() + 120
        while _passes(passes) < 1 and time.monotonic() < deadline:  # the program built and warmed up meanwhile
            time.sleep(0.05)
        time.sleep(0.5)
        seen["before"] = _passes(passes)  # still 1: the windowed pass waits for its plan
        if outcome == "plan fails":
            raise InputError("timeline.sqlite: no stage ranges")
        made = _plan(path)  # made beside its place: the program sees it once the launch is found to be the plan's
        return made, bf16 if outcome == "same" else Counters(["bf16", "tf32"], False, ["bf16", "tf32"])

    def argv_for(counters, comm_filter):
        return launch.argv + ([] if counters == bf16 and not comm_filter else ["--metrics", "more"])

    planner = _Planner(make, plan, None, argv_for, launch.argv, bf16)
    pids = []

    def beside(child_env, pid):
        pids.append(pid)
        planner(child_env, pid)

    log = tmp_path / "ncu_capture.log"
    if outcome == "same":
        out, rc = run_tool(launch.argv, log, 120, check=False, env=env, beside=beside)
        assert rc == 0, out
        assert seen["before"] == 1 and _passes(passes) == 2  # the warm-up, then the windowed pass once the plan came
        assert re.search(r"nsightflow: capture plan awaited: \d", out)
        assert planner.counters == bf16 and [w.step for w in planner.plan.windows] == [1]
        return
    with pytest.raises(_Replan if outcome == "other counters" else InputError) as raised:
        run_tool(launch.argv, log, 120, check=False, env=env, beside=beside)
    if outcome == "other counters":  # the log says what the launch started with and what the plan asked for
        assert "started with tensor precisions bf16, without the SASS counts (the probe saw: bf16)" in str(raised.value)
        assert "the plan's tensor precisions bf16, tf32, without" in str(raised.value)
    assert seen["before"] == 1 and _passes(passes) == 1  # stopped before its windowed pass
    assert not plan.exists()  # which never saw a plan
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)  # and nothing of it is left
    if outcome == "other counters":
        assert planner.wanted == launch.argv + ["--metrics", "more"]
        planner.publish()  # for the launch that replaces it
        from nsightflow.capture.read.plan import CapturePlan

        assert [w.step for w in CapturePlan.read(plan).windows] == [1]


def test_counters_before_the_plan_are_those_the_plan_then_asks_for(tmp_path):
    # The counters a capture starts with while its plan is made, against those its plan then asks for: equal on a real
    # run's plan (the default decoder on the H100, eager: every planned launch an operator's); where the count cannot
    # tell (a stage replaying CUDA graphs, whose launches fall between operators, or not counted), none: that plan is
    # made before ncu starts.
    import dataclasses
    import json

    from nsightflow.capture.launch.ncu_inputs import capture_counters, counters_before_plan

    run = DATA / "h100_probe"
    units = {int(e["unit"]) % 2 for e in json.loads((run / "plan.json").read_text())["expected"]}
    assert units == {1}  # operators' launches only
    flops = run / "analytic_flops.json"
    for precisions, non_tensor in (("auto", "auto"), ("all", False), (["bf16"], True)):
        before = counters_before_plan(precisions, non_tensor, flops)
        assert before == capture_counters(precisions, non_tensor, flops, run / "plan.json")
    auto = counters_before_plan("auto", "auto", flops)
    assert auto is not None and (auto.precisions, auto.non_tensor) == (["bf16"], False)
    analytic = AnalyticCounts.read(flops)
    first = next(iter(analytic.stages))
    stages = {**analytic.stages, first: dataclasses.replace(analytic.stages[first], graph_replays=3)}
    dataclasses.replace(analytic, stages=stages).write(tmp_path / "analytic_flops.json")
    assert counters_before_plan("auto", "auto", tmp_path / "analytic_flops.json") is None


@pytest.mark.parametrize(
    "spec,non_tensor,dtype,want",
    [
        ("auto", "auto", "bfloat16", (["bf16"], False)),
        ("auto", "auto", None, (["bf16"], False)),  # an LLM's usual precision where the workload declares none
        ("auto", "auto", "float16", (["fp16"], False)),
        ("auto", "auto", "float32", (["tf32"], True)),  # torch's default: float32 on the FMA units, SASS counts
        (["fp8", "bf16"], False, "float32", (["bf16", "fp8"], False)),  # the config's, as it names them
        ("all", True, "bfloat16", (["bf16", "fp16", "tf32", "fp8", "fp64_tensor"], True)),
    ],
)
def test_counters_before_the_timeline_follow_the_workloads_dtype_or_the_config(spec, non_tensor, dtype, want):
    """The counters ncu's launch starts with where it starts before its timeline (config ncu.start with_timeline),
    no probe pass having run: the declared dtype's precision, bfloat16 where none is declared."""
    from nsightflow.capture.launch.ncu_inputs import counters_before_timeline

    got = counters_before_timeline(spec, non_tensor, dtype)
    assert (got.precisions, got.non_tensor) == want
    assert got.seen_how and "guessed before the timeline" in got.seen_how[0]


def test_a_capture_rules_ncu_settings_are_one_param_that_follows_the_config():
    """The settings a capture rule passes (one dict param: Snakemake records and compares it) round-trip, follow each
    config key the rule uses, and keep the keys its kind of capture fixes."""
    from pathlib import Path

    import yaml

    from nsightflow.capture.launch.ncu_settings import NcuSettings

    config = yaml.safe_load((Path(__file__).parents[1] / "config" / "config.yaml").read_text())
    made = NcuSettings.of(config)
    assert NcuSettings.from_params(made.params()) == made
    assert made.clock_control == config["ncu"]["clock_control"] and made.ncu == config["tools"]["ncu"]
    flipped = "base" if config["ncu"]["clock_control"] == "none" else "none"
    other = {**config, "ncu": {**config["ncu"], "clock_control": flipped}}
    assert repr(NcuSettings.of(other).params()) != repr(made.params())  # a changed key reruns the rule
    ranges = NcuSettings.of(other, tensor_precisions="all", ranges=True, sections=[])
    assert ranges.clock_control == flipped and ranges.tensor_precisions == "all" and ranges.ranges


def test_a_capture_rules_files_and_plan_source_by_their_snakemake_names():
    """ncu_capture makes its plan (an output named plan, from the timeline under the rule's params); ncu_ranges and
    ncu_deep are given theirs (an input named plan): the records say which, with the files where the rule put them."""
    from types import SimpleNamespace

    from snakemake.iocontainers import InputFiles, OutputFiles

    from nsightflow.capture.launch.ncu_inputs import CaptureFiles, PlanSource
    from nsightflow.capture.launch.ncu_settings import NcuSettings

    given = {"sqlite": "r/timeline.sqlite", "flops": "r/analytic_flops.json", "manifest": "r/manifest.json"}
    made = {"plan": "r/plan.json", "rep": "r/ncu/capture.ncu-rep", "csv": "r/ncu/capture.raw.csv"}
    made |= {"cmd": "r/ncu/capture.cmd.json"}
    params = SimpleNamespace(domain="nsightflow", sample_steps=["first", "last"], mode="representatives")
    to = CaptureFiles.of(OutputFiles(fromdict=made), InputFiles(fromdict=given), "r/logs/ncu.log")
    source = PlanSource.of(InputFiles(fromdict=given), OutputFiles(fromdict=made), params)
    assert (to.plan, to.rep, to.csv, to.cmd, to.log, to.details) == (
        *(Path(made[k]) for k in ("plan", "rep", "csv", "cmd")),
        Path("r/logs/ncu.log"),
        None,
    )
    assert source.made and source.timeline == Path(given["sqlite"]) and source.sample_steps == ("first", "last")
    deep = {"rep": "r/deep.ncu-rep", "csv": "r/deep.raw.csv", "cmd": "r/deep.cmd.json", "details": "r/deep.txt"}
    given_plan = given | {"plan": "r/deep.plan.json"}
    to = CaptureFiles.of(OutputFiles(fromdict=deep), InputFiles(fromdict=given_plan), "r/logs/deep.log")
    source = PlanSource.of(InputFiles(fromdict=given_plan), OutputFiles(fromdict=deep), params)
    assert (to.plan, to.details) == (Path("r/deep.plan.json"), Path("r/deep.txt"))
    assert not source.made and source.maker(NcuSettings("ncu", "default"), to.log) is None
