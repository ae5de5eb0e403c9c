"""A serving loop as users run one: transformers' continuous batching (an engine not written here), profiled through
the workflow with its scheduler iterations as steps (config step_functions), on the CPU under torch.profiler."""

from __future__ import annotations

import json
import re
import sqlite3
import statistics
import sys
from collections import Counter
from typing import Any

import pandas as pd
import pytest
from conftest import ROOT, snakemake, torch_workflow

STEP = "transformers.generation.continuous_batching.continuous_api:ContinuousBatchProcessor._generation_step"
SUMMARY = "nsightflow.capture.inside.summaries:transformers_batch"
LLAMA = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
LLAMA |= {"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
PROMPTS, NEW = [8, 12, 16, 8, 12, 16], 6


def _engine_step_exists() -> bool:
    try:
        from transformers.generation.continuous_batching import continuous_api
    except ImportError:
        return False
    return callable(getattr(continuous_api.ContinuousBatchProcessor, "_generation_step", None))


def _gemm_flops(tokens: int | None = None, sampled: int | None = None) -> int:
    """The model's matrix FLOPs from the config and the requests: 2 per weight for every token the engine runs
    (``tokens``; all of them by default: each prompt's tokens in its prefill, then one token per request per decode
    iteration) through the decoder layers' projections (q and o: h·h; k and v: h·kv; the MLP: 3·h·i), and through
    the output head for ``sampled`` tokens (one per request per iteration: the engine computes logits only where it
    samples)."""
    h, i, layers, v = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["num_hidden_layers"], LLAMA["vocab_size"]
    kv = h // LLAMA["num_attention_heads"] * LLAMA["num_key_value_heads"]
    body = layers * (2 * h * h + 2 * h * kv + 3 * h * i)
    tokens = sum(PROMPTS) + len(PROMPTS) * (NEW - 1) if tokens is None else tokens
    sampled = len(PROMPTS) * NEW if sampled is None else sampled
    return 2 * (body * tokens + h * v * sampled)


def test_continuous_batching_iterations_are_the_steps_with_the_models_flops(tmp_path):
    if not _engine_step_exists():
        pytest.skip("this transformers has no ContinuousBatchProcessor._generation_step")
    argv = [sys.executable, str(ROOT / "tests" / "programs" / "continuous_batching.py"), "--config", json.dumps(LLAMA)]
    argv += ["--prompts", json.dumps(PROMPTS), "--new", str(NEW)]
    # every iteration is measured: a prefill-heavy one is not a warm-up (the automatic rule would set it apart)
    workload = {"name": "serve", "command": argv, "step_functions": {"iteration": STEP}, "warmup_steps": 0}
    workload["step_inputs"] = {"iteration": SUMMARY}  # the engine's batch before each iteration, built in
    work = torch_workflow(tmp_path, [workload])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "serve"
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    how = json.loads((run / "manifest.json").read_text())["stage_domain_how"]  # the run page's note on the stages
    assert how.startswith("Steps from the functions the workload names") and f"{STEP} is a step of 'iteration'" in how
    # one iteration prefills every prompt and samples its first token, then one iteration per further token
    assert list(stages.index) == ["iteration"] and int(stages.loc["iteration", "range_instances"]) == NEW
    counts = json.loads((run / "analytic_flops.json").read_text())["stages"]["iteration"]
    assert counts["by_class"]["gemm"] == _gemm_flops() and not counts["not_counted"]
    assert stages.loc["iteration", "flops_analytic"] == counts["flops"] > _gemm_flops()  # attention beside
    # each iteration's batch, from the requests: all prompts prefilled first, then one token per request each time
    steps = pd.read_csv(run / "steps.csv")
    n, prompt = len(PROMPTS), sum(PROMPTS)
    want = [f"requests={n}, prefill_tokens={prompt}, decode_tokens=0, kv_tokens={prompt}"]
    want += [f"requests={n}, prefill_tokens=0, decode_tokens={n}, kv_tokens={prompt + n * k}" for k in range(1, NEW)]
    assert list(steps["inputs"]) == want
    assert list(steps["mix"]) == ["prefill-only"] + [f"decode-only, batch {n}"] * (NEW - 1)
    # each iteration's model FLOPs: its matrix work from its tokens, and attention over a cache one token longer each
    # decode iteration (the count's steps sum to the stage's)
    assert steps["flops_model"].sum() == counts["flops_causal_adjusted"]
    attention = [f - _gemm_flops(prompt if k == 0 else n, n) for k, f in enumerate(steps["flops_model"])]
    assert all(a > 0 for a in attention) and attention[1:] == sorted(set(attention[1:]))


@pytest.mark.parametrize("per_step", [0, 2], ids=["at-once", "two-per-step"])
def test_the_built_in_serving_workload_accounts_for_every_request(tmp_path, per_step):
    """nsightflow.workloads.serving as a command (requests of drawn lengths, all at once or two joining before each
    of the engine's iterations), its iterations the steps and each one's batch summarised: over the iterations, the
    prompt tokens prefilled are the requests' prompts and the tokens decoded are their outputs less the first
    (sampled at the end of each prompt's prefill), as the program printed its request set; its own clock (tokens,
    time to first token) in its output. Arrivals per step are the same in every launch (nsightflow refuses a program
    whose steps differ between launches), and batches mix new prompts with others' decoding."""
    if not _engine_step_exists():
        pytest.skip("this transformers has no ContinuousBatchProcessor._generation_step")
    from nsightflow.workloads import serving

    config = {"model_type": "llama", **LLAMA}
    argv = [sys.executable, "-m", "nsightflow.workloads.serving", "--config", json.dumps(config), "--requests", "8"]
    argv += ["--prompt", "16", "--prompt-spread", "8", "--new", "6", "--new-spread", "2", "--no-warmup"]
    argv += ["--per-step", str(per_step)]
    workload = {"name": "served", "command": argv, "warmup_steps": 0}
    workload |= {"step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
    work = torch_workflow(tmp_path, [workload])
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "served"
    log = (run / "logs" / "torch_profile.log").read_text()
    said = json.loads(next(ln for ln in log.splitlines() if ln.startswith(serving.PREFIX))[len(serving.PREFIX) :])
    prompts, outputs = [p for p, _ in said["lengths"]], [k for _, k in said["lengths"]]
    assert said["tokens"] == sum(outputs) and said["ttft_ms_p50"] > 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["program_metrics"] == said  # the timed run's own numbers, on the run page too
    page = (run / "report.html").read_text()
    assert "own numbers (its clock, in the timed run)" in page and "<td>ttft_ms_p50</td>" in page
    steps = pd.read_csv(run / "steps.csv")
    inputs = [dict(kv.split("=") for kv in s.split(", ")) for s in steps["inputs"]]
    assert sum(float(i["prefill_tokens"]) for i in inputs) == sum(prompts)
    assert sum(float(i["decode_tokens"]) for i in inputs) == sum(k - 1 for k in outputs)
    assert all(0 < float(i["requests"]) <= len(prompts) for i in inputs)
    assert steps["mix"].iloc[0] == "prefill-only" and steps["mix"].str.startswith("decode-only").any()
    if per_step:  # iteration 0: the first two prompts alone; iteration 1: two more beside their first decode
        assert float(inputs[0]["requests"]) == per_step and float(inputs[0]["prefill_tokens"]) == sum(prompts[:2])
        assert float(inputs[1]["decode_tokens"]) == per_step and steps["mix"].iloc[1] in ("mixed", "prefill-heavy")
    counts = json.loads((run / "analytic_flops.json").read_text())["stages"]["iteration"]
    assert steps["flops_model"].sum() == counts["flops_causal_adjusted"]


# The ring's arms, by participant: alone, timed (under nsightflow's timed hook) and alone again. ARMS, one process an
# arm, is the CPU test's ring. On the GPU host such a ring read the second alone process against the first at -2.2%,
# -6.5%, -8.1% and -6.3% in four runs, the first participant the slowest in all of them: one process (or the ring's
# first place) keeps a pace of its own over its whole run, which turns do not average out. GPU_ARMS puts each arm in
# two processes at mirrored places, after a pacer (participant 0, not measured: it starts first and holds the token
# first).
ARMS = {"alone": [0], "timed": [1], "alone again": [2]}
GPU_ARMS = {"pacer": [0], "alone": [1, 6], "timed": [2, 5], "alone again": [3, 4]}


def _serving_ring(
    tmp, workload: list[str], arms: dict[str, list[int]], cwd=None, timeout: float = 600, cpus=None
) -> tuple[list[dict], list[dict]]:
    """The serving workload (its arguments ``workload``) in one process per participant of ``arms`` (name ->
    participants), taking turns at each engine iteration (tests/serving_ring.py) in participant order, the ``timed``
    ones under nsightflow's timed hook, all on ``cpus`` if given. Each one's output, and the timed ones' hook
    records."""
    from serving_ring import run_ring

    kinds = ["alone"] * (1 + max(i for ps in arms.values() for i in ps))
    for i in arms["timed"]:
        kinds[i] = "timed"
    out, records = run_ring(tmp, workload, kinds, cwd, timeout, cpus)
    return out, [records[i] for i in arms["timed"]]


def _walls(out: list[dict], arms: dict[str, list[int]]) -> dict[str, list[list[float]]]:
    """Each arm's processes' iteration walls."""
    return {name: [out[i]["passes"][0]["walls"]["iteration"] for i in ps] for name, ps in arms.items()}


def _sandwiched(out: list[dict], arms: dict[str, list[int]]) -> tuple[list[float], list[float]]:
    """The ring's ratios by iteration: the timed arm's iteration k (the mean over its processes) against the mean of
    the two alone arms' iteration k (the turns around it: the same batch, at nearly the same moment), and the second
    alone arm's against the first's (the design's own noise). An engine's consecutive iterations differ (a prefill,
    then decodes of a shrinking batch), so each is compared only with the same iteration of the others."""
    by = {k: [statistics.fmean(ws) for ws in zip(*v, strict=True)] for k, v in _walls(out, arms).items()}
    alone, timed, again = by["alone"], by["timed"], by["alone again"]
    pace = [t / ((a + b) / 2) for a, t, b in zip(alone, timed, again, strict=True)]
    return pace, [b / a for a, b in zip(alone, again, strict=True)]


def _summed(out: list[dict], arms: dict[str, list[int]]) -> tuple[float, float]:
    """The ring's loops whole, as their throughput compares (tokens over the iterations' summed walls): the timed
    arm's summed walls against the mean of the two alone arms', and the second alone arm's against the first's."""
    by = {k: sum(sum(w) for w in v) for k, v in _walls(out, arms).items()}
    return 2 * by["timed"] / (by["alone"] + by["alone again"]), by["alone again"] / by["alone"]


def test_serving_processes_take_turns_at_each_iteration_one_under_the_timed_hook(tmp_path):
    """The serving pace test's ring (tests/serving_ring.py) on the CPU: three processes of the serving workload, the
    second under nsightflow's timed hook, run their engine's iterations in turns, one at a time in ring order; each
    runs the same iterations (requests arriving per step), the hook followed every one of them in its arm (its
    summaries: one per iteration, the prompt tokens summing to the requests'), and each timed iteration is compared
    with the same iteration of the alone arms, the turns just before and after it."""
    if not _engine_step_exists():
        pytest.skip("this transformers has no ContinuousBatchProcessor._generation_step")
    from nsightflow.workloads import serving

    config = {"model_type": "llama", **LLAMA}
    workload = ["--config", json.dumps(config), "--requests", "6", "--prompt", "12", "--prompt-spread", "4"]
    workload += ["--new", "5", "--new-spread", "2", "--per-step", "2", "--no-warmup", "--max-batch-tokens", "64"]
    out, records = _serving_ring(tmp_path, workload, ARMS, timeout=300)
    record = records[0]
    walls = [o["passes"][0]["walls"]["iteration"] for o in out]
    n = len(walls[0])
    assert n > 3 and [len(w) for w in walls] == [n, n, n]
    starts = sorted((t, o["index"]) for o in out for t in o["passes"][0]["turns"])
    assert [i for _, i in starts] == [0, 1, 2] * n  # iteration k of each arm, then iteration k + 1 of each
    summaries = record["step_inputs"]["iteration"]
    assert len(summaries) == n and all(s is not None for s in summaries)
    said = [ln for i in range(3) for ln in (tmp_path / f"{i}.log").read_text().splitlines()]  # each one's output
    lengths = [json.loads(ln[len(serving.PREFIX) :])["lengths"] for ln in said if ln.startswith(serving.PREFIX)]
    assert len(lengths) == 3 and lengths[0] == lengths[1] == lengths[2]
    assert sum(s["prefill_tokens"] for s in summaries) == sum(p for p, _ in lengths[0])
    a, t, b = walls
    pace, control = _sandwiched(out, ARMS)
    assert pace == pytest.approx([2 * t[k] / (a[k] + b[k]) for k in range(n)])
    assert control == pytest.approx([b[k] / a[k] for k in range(n)])
    assert _summed(out, ARMS) == pytest.approx((2 * sum(t) / (sum(a) + sum(b)), sum(b) / sum(a)))
    # an arm of several processes: their iterations' mean, their walls' sum
    two = {"alone": [0], "timed": [1, 2], "alone again": [0]}
    assert _sandwiched(out, two)[0] == pytest.approx([(t[k] + b[k]) / 2 / a[k] for k in range(n)])
    assert _summed(out, two) == pytest.approx(((sum(t) + sum(b)) / sum(a), 1.0))


def test_requests_arriving_at_a_rate_are_all_served(capsys, monkeypatch):
    """The serving workload alone, 8 requests 40 a second (the engine's iterations then depend on its pace, so they
    differ from run to run: a run nsightflow profiles submits them at once): every request served, its own numbers
    printed. Its tokens per second run from the first arrival to the last token: the arrivals' 175 ms are in it, the
    engine's teardown (here made 0.5 s longer) is not."""
    if not _engine_step_exists():
        pytest.skip("this transformers has no ContinuousBatchProcessor._generation_step")
    import time

    from transformers.generation.continuous_batching import continuous_api

    from nsightflow.capture.read.own_metrics import own_metrics
    from nsightflow.workloads import serving

    stop, serve, walls = continuous_api.ContinuousBatchingManager.stop, serving.serve, []

    def slow_stop(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return stop(self, *args, **kwargs)

    def timed_serve(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return serve(*args, **kwargs)
        finally:
            walls.append(time.perf_counter() - began)

    monkeypatch.setattr(continuous_api.ContinuousBatchingManager, "stop", slow_stop)
    monkeypatch.setattr(serving, "serve", timed_serve)
    serving.main(["--config", json.dumps({"model_type": "llama", **LLAMA}), "--requests", "8", "--prompt", "16"]
                 + ["--new", "6", "--new-spread", "2", "--no-warmup", "--rate", "40"])  # fmt: skip
    said = own_metrics(capsys.readouterr().out)
    assert said["requests"] == 8 and said["tokens"] == sum(k for _, k in said["lengths"])
    assert said["tpot_ms_p50"] > 0 and said["ttft_ms_p90"] >= said["ttft_ms_p50"] > 0
    assert 7 / 40 <= said["served_s"] < walls[0] - 0.5
    assert said["tokens_per_s"] == pytest.approx(said["tokens"] / said["served_s"])


def test_a_programs_own_numbers_are_read_from_its_output_or_refused():
    from nsightflow.capture.read.own_metrics import own_metrics
    from nsightflow.errors import CaptureError

    out = 'step 1\nrank 0: nsightflow-metrics: {"tokens_per_s": 10}\nnsightflow-metrics: {"tokens_per_s": 12.5}\n'
    assert own_metrics(out) == {"tokens_per_s": 12.5} and own_metrics("no line\n") == {}
    with pytest.raises(CaptureError, match="no JSON object after it"):
        own_metrics("nsightflow-metrics: tokens=3")
    with pytest.raises(CaptureError, match="holds list, not an object"):
        own_metrics("nsightflow-metrics: [1, 2]")


# A Llama-1B-shaped model (random weights, bf16) served on the GPU host, as the serving targets ask.
SERVE_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16}
SERVE_1B |= {"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}


def _nsight_workflow(tmp_path, workload: dict, ncu: dict | None = None):
    import yaml
    from conftest import copy_workflow

    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    cfg.update(workloads=[workload], profiler="nsight")
    cfg["ncu"].update(ncu or {})
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return work


def _gpu_serving(requests: int, prompt: tuple[int, int], new: tuple[int, int], config: dict = SERVE_1B) -> list[str]:
    from nsightflow.workloads import serving

    argv = [sys.executable, "-m", serving.__name__, "--config", json.dumps(config), "--dtype", "bfloat16"]
    argv += ["--device", "cuda", "--requests", str(requests), "--prompt", str(prompt[0]), "--prompt-spread"]
    return argv + [str(prompt[1]), "--new", str(new[0]), "--new-spread", str(new[1])]


@pytest.mark.gpu
def test_serving_a_1b_llama_on_the_gpu_keeps_its_pace_and_counts_every_request(tmp_path):
    """64 requests of mixed lengths through transformers' engine on the GPU, profiled by its iterations. The pace:
    the program alone, under nsightflow's timed hook (as a command's timed run has it: the iterations followed, each
    one's batch summarised, one in 32 clocked on the GPU) and alone again, two processes an arm at mirrored places
    of a ring of seven (GPU_ARMS; a pacer first) taking turns at each engine iteration (tests/serving_ring.py), all
    on the same four CPUs, so that the arms' iterations run at nearly the same moments: one launch of this loop runs
    30% to 70% faster or slower than the next on a shared H200 host, in slow and fast spells of tens of seconds, so
    launches compared whole compare the host's moments (the median of three timed launches against their
    neighbours alone read −22% to +15% from run to run, docs/benchmarks.md), and one process an arm kept an offset
    of its own (ARMS' comment). The hook acts at the iterations only, so the iterations' summed walls are the loop's
    pace (its tokens a second are tokens over them): the timed arm's against the mean of the two alone arms', held
    to 5%, and the second alone arm's against the first's too (the design's own noise). The ring's loop generates
    1.5 times the workflow's tokens (168 iterations a process, 336 an arm). Every run is in the workflow's folder
    (cuDNN's attention kernel is compiled at run time with the working folder in its debug information: in a folder
    where the program never ran, the CUDA driver's JIT cache misses and the first iteration compiles it, about 1 s
    more; benchmarks/first_token.py); a first run of the loop there, not counted, fills the cache. The GEMM FLOPs
    counted over the workflow loop's iterations within 1% of those from the requests; the whole workflow at most 5
    times the loop alone (its runs before and after)."""
    import subprocess
    import time

    from nsightflow.capture.read.own_metrics import own_metrics
    from nsightflow.workloads import serving

    # a batch limit of its own (every prompt fits in the first iteration): the engine's default, sized from the GPU's
    # free memory, took 98 GiB a process, and the ring's three did not fit
    argv = [*_gpu_serving(64, (256, 192), (64, 48)), "--max-batch-tokens", "32768"]
    steps = {"step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
    # ncu's launch starts with the timeline's, its start-up beside theirs (nsightflow.capture.launch.together)
    workload = {"name": "serve", "command": argv, "warmup_steps": 0} | steps
    work = _nsight_workflow(tmp_path, workload, {"start": "with_timeline"})
    runs: list[tuple[float, float]] = []  # the loop alone (tokens/s, s), before and after the workflow

    def alone_run() -> None:
        began = time.monotonic()
        done = own_metrics(subprocess.run(argv, capture_output=True, text=True, check=True, cwd=work).stdout)
        runs.append((done["tokens_per_s"], time.monotonic() - began))

    subprocess.run(argv, capture_output=True, text=True, check=True, cwd=work)  # fills the folder's JIT cache
    ring = tmp_path / "ring"
    ring.mkdir()
    # all 64 requests join before the first iteration (--per-step: the same iterations in every arm); 1.5 times the
    # tokens to generate (the later options win): 168 iterations a process, 336 an arm
    ring_argv = [*argv[3:], "--per-step", "64", "--new", "96", "--new-spread", "72"]
    # every process of the ring on the same four CPUs: unpinned, one process's engine thread keeps to one CPU for the
    # whole loop, and on a slower one its summed walls were 5% to 6% above the others'
    from test_gpu import _gpu_local_cpus

    out, records = _serving_ring(ring, ring_argv, GPU_ARMS, cwd=work, timeout=900, cpus=_gpu_local_cpus()[:4])
    walls = _walls(out, GPU_ARMS)
    n = len(records[0]["step_inputs"]["iteration"])
    assert n > 160 and all(len(w) == n for ws in walls.values() for w in ws)
    timed_r, control_r = _sandwiched(out, GPU_ARMS)
    q = [f"{x - 1:+.2%}" for x in statistics.quantiles(timed_r, n=4)]
    pace, control = (r - 1 for r in _summed(out, GPU_ARMS))
    sums = {k: [round(sum(w), 2) for w in ws] for k, ws in walls.items()}
    print(f"serving on the GPU, iterations in turns ({n} a process): summed walls by arm and process {sums} s: the "
          f"timed arm against the alone arms {pace:+.2%}, alone again against alone {control:+.2%}; each timed "
          f"iteration against the alone arms' same one: median {statistics.median(timed_r) - 1:+.2%} (quartiles "
          f"{q[0]} to {q[2]}), alone again against alone {statistics.median(control_r) - 1:+.2%}")  # fmt: skip
    print(f"serving on the GPU, the ring's walls (s): {json.dumps([o['passes'][0]['walls'] for o in out])}")
    print(f"serving on the GPU, the ring's CPUs: {[Counter(o.get('cpus', [])).most_common(2) for o in out]}")
    alone_run()
    began = time.monotonic()
    snakemake(work, "--cores", "1", "results/report.html")
    workflow_s = time.monotonic() - began
    alone_run()
    run = work / "results" / "serve"
    manifest = json.loads((run / "manifest.json").read_text())
    ours = manifest["program_metrics"]
    alone_s = statistics.median(s for _, s in runs)
    steps_csv = pd.read_csv(run / "steps.csv")
    counts = json.loads((run / "analytic_flops.json").read_text())["stages"]["iteration"]
    h, i, layers = SERVE_1B["hidden_size"], SERVE_1B["intermediate_size"], SERVE_1B["num_hidden_layers"]
    kv = h // SERVE_1B["num_attention_heads"] * SERVE_1B["num_key_value_heads"]
    body = layers * (2 * h * h + 2 * h * kv + 3 * h * i)
    lengths = ours["lengths"]
    tokens = sum(p for p, _ in lengths) + sum(k - 1 for _, k in lengths)
    want = 2 * (body * tokens + h * SERVE_1B["vocab_size"] * sum(k for _, k in lengths))
    got = (counts.get("by_class") or {}).get("gemm")
    print(f"serving on the GPU: tokens/s {ours['tokens_per_s']:.1f} in the workflow's timed run, the loop alone "
          f"{[round(t, 1) for t, _ in runs]} before and after it (launches compared whole: not the pace test); "
          f"TTFT p50 in the workflow {ours.get('ttft_ms_p50')} ms, TPOT p50 {ours.get('tpot_ms_p50')} ms; "
          f"GEMM FLOPs {got} against "
          f"{want:.6g} from the requests; workflow {workflow_s:.0f} s, the loop alone {alone_s:.0f} s "
          f"({workflow_s / alone_s:.1f}x); iterations by mix {steps_csv['mix'].value_counts().to_dict()}; "
          f"not counted: {counts.get('not_counted')}")  # fmt: skip
    jobs = {t.stem: float(pd.read_csv(t, sep="\t")["s"].iloc[0]) for t in (run / "benchmarks").glob("*.tsv")}
    print(f"serving on the GPU, seconds by job: {jobs}")
    timeline_log = (run / "logs" / "timeline.log").read_text(errors="replace")
    nsys_ran = re.search(r"; ran from ([0-9.]+) to ([0-9.]+)", timeline_log)  # the profiler's own span
    programs = re.search(r"timed run's program ran from ([0-9.]+) to ([0-9.]+); under nsys from ([0-9.]+) to ([0-9.]+)",
                         timeline_log)  # fmt: skip
    if nsys_ran and programs:  # where the timeline job's time went, from its log (s from nsys's start)
        n0, n1 = map(float, nsys_ran.groups())
        t0, t1, p0, p1 = (float(x) - n0 for x in programs.groups())
        print(f"serving on the GPU, the timeline job: the timed run's program {t0:.1f} to {t1:.1f} s, the one under "
              f"nsys {p0:.1f} to {p1:.1f} s (its steps after the timed run's end), nsys's end {n1 - n0:.1f} s "
              f"(its import and export {n1 - n0 - p1:.1f} s)")  # fmt: skip
    waited = re.search(r"this launch waited ([0-9.]+ s at its first contact \([^)]*\))", timeline_log)
    print(f"serving on the GPU, the launch under nsys {waited.group(1) if waited else 'passed its gate at install'}")
    ncu_log = (run / "logs" / "ncu_capture.log").read_text(errors="replace")
    held = re.search(r"this launch waited ([0-9.]+ s at its first contact \([^)]*\))", ncu_log)
    print(f"serving on the GPU, ncu's launch {held.group(1) if held else 'was not held'}; its log's stamps: "
          f"{re.findall(r'ran from [0-9.]+ to [0-9.]+|job took [0-9.]+ s', ncu_log)}")  # fmt: skip
    passes = Counter(re.findall(r"==PROF== Profiling .* (\d+) pass", ncu_log))
    metrics = next((ln for ln in ncu_log.splitlines() if "--metrics" in ln), "")
    print(f"serving on the GPU, the ncu job: profiled launches by replay passes {dict(passes)}; its argv: "
          f"{metrics[:600]}")  # fmt: skip
    # What a cheaper plan could leave out: in each window after the first, the planned launches whose kernel
    # function an earlier window already profiled (at another batch's shapes, or another call).
    seen: set[str] = set()
    planned = json.loads((run / "plan.json").read_text())
    for w in planned["windows"]:
        mine = [e["mangled"] for e in planned["expected"] if (e["stage"], e["step"]) == (w["stage"], w["step"])]
        print(f"serving on the GPU, window at step {w['step']}: {len(mine)} launches planned, "
              f"{sum(m in seen for m in mine)} of them of kernels an earlier window profiled")  # fmt: skip
        seen |= set(mine)
    assert abs(pace) < 0.05 and abs(control) < 0.05
    assert got is not None and abs(got / want - 1) < 0.01
    assert workflow_s / alone_s <= 5


@pytest.mark.gpu
def test_a_window_of_a_long_serving_run_is_all_that_is_profiled_on_the_gpu(tmp_path):
    """Steps 20 to 39 of a run of about 220 iterations: every iteration timed, the window's 20 profiled, ncu's plan
    windows inside them only."""
    from nsightflow.workloads import serving

    argv = _gpu_serving(8, (64, 0), (220, 0))
    workload = {"name": "window", "command": argv, "warmup_steps": 0, "window": {"start": 20, "steps": 20}}
    workload |= {"step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
    work = _nsight_workflow(tmp_path, workload)
    snakemake(work, "--cores", "1", "results/report.html")
    run = work / "results" / "window"
    manifest = json.loads((run / "manifest.json").read_text())
    every = len(manifest["every_wall_s"]["iteration"])
    stages = pd.read_csv(run / "stages.csv").set_index("stage")
    planned = json.loads((run / "plan.json").read_text())
    steps = {w["step"] for w in planned["windows"]}
    # nothing outside the window traced: no kernel launched before its first step's range or after its last's
    con = sqlite3.connect(run / "timeline" / "timeline.sqlite")
    mirrored = 'SELECT n.start, n."end" FROM NVTX_EVENTS n JOIN NVTX_EVENTS d ON d.eventType = 75 AND '
    mirrored += "d.domainId = n.domainId AND d.text = 'nsightflow' WHERE n.eventType = 59"
    first, last, ranged = con.execute(f'SELECT MIN(start), MAX("end"), COUNT(*) FROM ({mirrored})').fetchone()
    launch = "SELECT rt.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt "
    launch += "ON rt.correlationId = k.correlationId"
    kernels, outside = con.execute(
        f"SELECT COUNT(*), SUM(start < ? OR start > ?) FROM ({launch})", (first, last)
    ).fetchone()
    print(f"window: {every} iterations timed, {int(stages.loc['iteration', 'range_instances'])} profiled; ncu's "
          f"windows in steps {sorted(steps)}; the timeline: {ranged} step ranges, {kernels} kernels, {outside} "
          "launched outside them")  # fmt: skip
    assert every >= 200 and int(stages.loc["iteration", "range_instances"]) == 20 == ranged
    assert steps and all(20 <= s < 40 for s in steps)
    assert kernels > 0 and outside == 0


@pytest.mark.gpu
def test_a_serving_windows_counters_match_ncu_over_every_launch_of_its_steps(tmp_path):
    """Requests joining two per iteration (prefills sharing batches with decodes: iterations of several mixes), steps
    6 to 11 profiled: the window's tensor FLOPs and DRAM bytes, from sampled steps and one launch per class, within
    1% of nsightflow's capture of every launch of every one of those steps, made by a second run of the same command
    (the 1B shape at 4 layers, so that every launch of six iterations is a few minutes of ncu). The sampled capture
    starts ncu's launch with the timeline (``ncu.start: with_timeline``), the reference after it."""
    from nsightflow.records import Summary
    from nsightflow.workloads import serving

    argv = _gpu_serving(16, (128, 64), (24, 8), {**SERVE_1B, "num_hidden_layers": 4}) + ["--per-step", "2"]
    workload = {"name": "serve", "command": argv, "warmup_steps": 0, "window": {"start": 6, "steps": 6}}
    workload |= {"step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
    got = {}
    # the sampled capture's ncu launch started with its timeline (its start-up beside theirs), the reference's after
    sampled = {"start": "with_timeline"}
    for name, ncu in (("sampled", sampled), ("every", {"capture": "every_launch", "sample_steps": ["every:1"]})):
        work = _nsight_workflow(tmp_path / name, workload, ncu)
        snakemake(work, "--cores", "1", "results/report.html")
        run = work / "results" / "serve"
        got[name] = pd.read_csv(run / "stages.csv").set_index("stage").loc["iteration"]
        steps = pd.read_csv(run / "steps.csv")
        plan = json.loads((run / "plan.json").read_text())
        print(f"serving window, {name}: {len(plan['expected'])} launches profiled in {len(plan['windows'])} windows; "
              f"mixes {steps['mix'].value_counts().to_dict()}")  # fmt: skip
        print([n for n in Summary.read(run / "summary.json").notes() if "profiled in no step" in n])
    sampled, every = got["sampled"], got["every"]
    assert int(sampled["range_instances"]) == int(every["range_instances"]) == 6
    for column in ("flops_measured_gemm", "flops_measured_attention", "flops_analytic_attention"):
        print(f"serving window {column}: {sampled[column]:.6g} (every launch: {every[column]:.6g})")
    for column in ("flops_tensor_measured", "dram_bytes_measured"):
        print(f"serving window {column}: {sampled[column]:.6g} vs every launch {every[column]:.6g} "
              f"({sampled[column] / every[column] - 1:+.3%})")  # fmt: skip
        assert abs(sampled[column] / every[column] - 1) < 0.01
