"""The harness on the CPU: analytic FLOPs against the model's own arithmetic, passes, the probe's windows,
bad callables."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsightflow.capture.inside import passes
from nsightflow.capture.inside.probe import WHOLE, Windows
from nsightflow.workloads import api

SMALL = dict(
    batch=2,
    prompt=16,
    decode_steps=3,
    vocab=512,
    d_model=64,
    n_layers=2,
    n_heads=4,
    d_ff=96,
    dtype="float32",
    device="cpu",
)


def _matmuls(tokens, b=2, d=64, f=96, v=512, n=2):
    """Per layer: qkv, proj, gate_up, down; then the LM head on the last position."""
    return n * 2 * b * tokens * (d * 3 * d + d * d + d * 2 * f + f * d) + 2 * b * 1 * d * v


def _attention(sq, sk, b=2, h=4, hd=16, n=2):
    """Q·Kᵀ and P·V of every head of every layer, in full."""
    return n * 2 * b * h * sq * sk * (hd + hd)


def test_flops_match_the_model_arithmetic():
    out = passes.count_flops(api.build_workload("nsightflow.workloads.decoder:build", SMALL)).stages
    pre, dec = out["prefill"], out["decode"]
    assert pre.flops == _matmuls(16) + _attention(16, 16)
    # Causal prefill: query i sees keys 0..i, so 16·17/2 of the 16·16 score pairs are computed.
    assert pre.flops_causal_adjusted == _matmuls(16) + _attention(16, 16) * (16 * 17 // 2) // (16 * 16)
    assert pre.by_class == {"gemm": _matmuls(16), "attention": _attention(16, 16), "other": 0}
    # Decode step s: one query against the prompt and s + 1 cached tokens; nothing is masked.
    assert dec.flops == sum(_matmuls(1) + _attention(1, 16 + s + 1) for s in range(3))
    assert dec.causal_masked_flops == 0 and dec.repeats == 3 and dec.not_counted == []


def test_grouped_query_attention_counts_the_query_heads():
    import torch

    q = torch.randn(2, 8, 5, 16)  # 8 query heads
    kv = torch.randn(2, 2, 7, 16)  # 2 key/value heads (GQA, 4 queries per group)

    def step(_):
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)

    got = passes.count_flops(api.Workload(setup=lambda: None, stages=[api.Stage("a", step)])).stages["a"]
    full = 2 * 2 * 8 * 5 * 7 * (16 + 16)
    kept = sum(min(i + 1, 7) for i in range(5))  # top-left causal mask, 5 queries over 7 keys
    assert got.not_counted == [] and got.attention_flops_full == full
    assert got.flops_causal_adjusted == full * kept // (5 * 7)


def test_grouped_gemms_count_the_tokens_each_expert_got_forward_and_backward():
    """An MoE's experts as one torch._grouped_mm (tokens sorted by expert, offs their cumulative ends, as
    transformers' Mixtral runs them), with the padding rows after the last end not counted; its backward runs
    grouped GEMMs too. Expected: the same products made one expert at a time, counted from their shapes."""
    import torch

    tokens, k, n, experts = 40, 16, 24, 4
    routed = [5, 0, 15, 13]  # 33 of 40 rows: the last 7 are padding
    ends = torch.tensor(routed, dtype=torch.int32).cumsum(0).to(torch.int32)
    x = torch.randn(tokens, k, requires_grad=True)
    w = torch.randn(experts, k, n, requires_grad=True)

    def forward(_):
        torch._grouped_mm(x, w, offs=ends)

    grad = torch.randn(tokens, n)

    def backward(_):
        torch._grouped_mm(x, w, offs=ends).backward(grad)

    wl = api.Workload(setup=lambda: None, stages=[api.Stage("fwd", forward), api.Stage("fwd_bwd", backward)])
    got = passes.count_flops(wl).stages
    per_expert = sum(2 * m * k * n for m in routed)
    assert got["fwd"].by_class["gemm"] == per_expert and got["fwd"].not_counted == []
    assert got["fwd"].by_op == {"aten._grouped_mm": per_expert}
    # backward: dX (tokens x n by n x k per expert) and dW (k x tokens by tokens x n per expert), each the forward's
    assert got["fwd_bwd"].by_class["gemm"] == 3 * per_expert


def test_flex_attention_counts_the_pairs_its_block_mask_keeps_eager_and_compiled():
    """torch's flex attention (a higher-order operator, which a dispatch mode sees only where it accepts such
    operators) with a causal mask, a document mask of three 100-token documents in the first batch row only, and a
    causal sliding window of 64 keys (Mistral's, Gemma's local layers). Expected: Q·Kᵀ and P·V of every kept
    (query, key) pair, the pairs counted from the masks' definitions."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, h, n, d = 2, 4, 300, 16  # 300: a partial last block of 128
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    causal = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, n, n, device="cpu")

    def documents(b_, h_, qi, ki):
        return (qi >= ki) & (qi // 100 == ki // 100) & (b_ == 0)

    docs = create_block_mask(documents, b, None, n, n, device="cpu")
    w = 64
    window = create_block_mask(lambda b_, h_, qi, ki: (qi >= ki) & (qi - ki < w), None, None, n, n, device="cpu")
    compiled = torch.compile(flex_attention)
    stages = {
        "causal": lambda _: flex_attention(q, k, v, block_mask=causal),
        "documents": lambda _: flex_attention(q, k, v, block_mask=docs),
        "window": lambda _: flex_attention(q, k, v, block_mask=window),
        "compiled": lambda _: compiled(q, k, v, block_mask=causal),
    }
    wl = api.Workload(setup=lambda: None, stages=[api.Stage(s, fn) for s, fn in stages.items()])
    got = passes.count_flops(wl).stages
    per_pair = 2 * (d + d)
    full = per_pair * b * h * n * n
    sliding = b * h * (w * (w + 1) // 2 + (n - w) * w)  # query i keeps min(i + 1, w) keys
    for stage, kept in (
        ("causal", b * h * n * (n + 1) // 2),
        ("documents", h * 3 * 100 * 101 // 2),
        ("window", sliding),
    ):
        assert got[stage].not_counted == [] and got[stage].by_class["attention"] == full
        assert got[stage].flops_causal_adjusted == per_pair * kept, stage
    assert got["compiled"].flops_causal_adjusted == got["causal"].flops_causal_adjusted


def _stages(entries: dict) -> dict:
    """Analytic stage records (nsightflow.records.StageCount) from the fields of analytic_flops.json's stages."""
    from nsightflow.records import AnalyticCounts

    return AnalyticCounts.from_dict({"stages": entries}).stages


def _counts_without_and_with_tf32(stages: dict) -> tuple[dict, dict]:
    """The probe pass's per-stage counts of ``stages`` (name -> fn(step)), with TF32 disallowed, then allowed."""
    import torch

    wl = api.Workload(setup=lambda: None, stages=[api.Stage(n, fn) for n, fn in stages.items()])
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        off = passes.count_flops(wl).stages
        torch.backends.cuda.matmul.allow_tf32 = True
        on = passes.count_flops(wl).stages
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return off, on


def test_the_count_records_the_tensor_precisions_of_gemms_and_attentions():
    import torch
    import torch.nn.functional as F

    from nsightflow.precisions import tensor_precision

    a16, b16, f32 = torch.randn(8, 8).to(torch.bfloat16), torch.randn(8, 8).to(torch.float16), torch.randn(8, 8)
    q = torch.randn(1, 2, 4, 8).to(torch.float16)
    attention = torch.nn.functional.scaled_dot_product_attention
    stages = {
        "bf16 matmul, fp16 attention, bf16 add": lambda _: (a16 @ a16, a16 + a16, attention(q, q, q)),
        "fp16 and float32 matmuls": lambda _: (b16 @ b16, f32 @ f32),
        "float32 elementwise only": lambda _: f32 * f32,
    }
    off, on = _counts_without_and_with_tf32(stages)
    assert off["bf16 matmul, fp16 attention, bf16 add"].tensor_precisions == ["bf16", "fp16"]
    # float32 runs on tensor cores only as TF32, on a CUDA device where torch allows it, else on the FMA units: the
    # CPU's float32 matmul is fp32 whatever torch's TF32 switches say.
    assert off["fp16 and float32 matmuls"].tensor_precisions == ["fp16", "fp32"]
    assert on["fp16 and float32 matmuls"].tensor_precisions == ["fp16", "fp32"]
    assert tensor_precision("float32", tf32=True) == "tf32" and tensor_precision("float32", tf32=False) == "fp32"
    assert off["float32 elementwise only"].tensor_precisions == []
    # A float32 convolution on the CPU, with cuDNN's allow_tf32 on (its default): fp32, not tf32.
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    assert torch.backends.cudnn.allow_tf32
    conv = passes.count_flops(api.Workload(lambda: None, [api.Stage("c", lambda _: F.conv2d(x, w))]))
    assert conv.stages["c"].tensor_precisions == ["fp32"]


def test_mfu_precision_is_the_one_most_gemm_flops_ran_in_else_the_declared_dtype():
    import torch

    from nsightflow.precisions import matmul_precision

    a16, h16, f32 = torch.randn(8, 8).to(torch.bfloat16), torch.randn(4, 4).to(torch.float16), torch.randn(4, 4)
    stages = {
        "mostly bf16": lambda _: (a16 @ a16, h16 @ h16),
        "float32 and elementwise": lambda _: (f32 @ f32, a16 * 2),
    }
    off, on = _counts_without_and_with_tf32(stages)
    # FLOPs per precision from the shapes: 2·8³ in bf16, 2·4³ in fp16, 2·4³ in float32.
    assert off["mostly bf16"].by_precision == {"bf16": 1024, "fp16": 128}
    assert off["float32 and elementwise"].by_precision == {"fp32": 128}
    got = matmul_precision(None, off)
    assert (got.precision, got.dtype, got.source, got.level) == ("bf16", "bfloat16", "probe", "info")
    assert "not declared" in got.why and "80% of the GEMM" in got.why
    as_declared = matmul_precision("bfloat16", off)
    assert (as_declared.precision, as_declared.level) == ("bf16", "")
    # Declared float16 (or float32 under autocast) but most GEMM FLOPs ran in bf16: the bf16 peak, and a warning.
    overruled = matmul_precision("float16", off)
    assert (overruled.precision, overruled.dtype, overruled.level) == ("bf16", "bfloat16", "warning")
    assert "declares float16, but 80%" in overruled.why

    # A model kept in float32 that multiplies under autocast: the probe sees bf16 GEMMs (the bf16 peak, warned).
    def autocast(_):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return f32 @ f32

    wl = api.Workload(setup=lambda: None, stages=[api.Stage("s", autocast)], dtype="float32")
    counted = passes.count_flops(wl).stages
    assert counted["s"].by_precision == {"bf16": 128}
    under_autocast = matmul_precision(wl.dtype, counted)
    assert (under_autocast.precision, under_autocast.level) == ("bf16", "warning")
    # A declared float32 whose GEMMs ran as TF32 (on a GPU) divides by the TF32 peak; without TF32, by the FMA units'.
    assert matmul_precision("float32", {"s": off["float32 and elementwise"]}).precision == "fp32"
    tf32 = matmul_precision("float32", _stages({"s": {"by_precision": {"tf32": 128}}}))
    assert (tf32.precision, tf32.dtype, tf32.level) == ("tf32", "float32", "info")
    # A tie goes to the declared dtype.
    tie = _stages({"s": {"by_precision": {"bf16": 10, "fp16": 10}}})
    assert (
        matmul_precision("float16", tie).precision == "fp16" and matmul_precision("bfloat16", tie).precision == "bf16"
    )
    # Nothing seen (CUDA-graph replays, no counting pass): the declared dtype, else no compute peak at all (a float32
    # peak under bf16 work would put MFU at many times 100%).
    graphs = _stages({"s": {"by_precision": {}, "not_counted": ["the stage replays CUDA graphs (4 replays)"]}})
    assert (matmul_precision("float16", graphs).precision, matmul_precision("float16", graphs).source) == (
        "fp16",
        "declared",
    )
    for blind in (graphs, None, _stages({"s": {"by_class": {"gemm": 10}}})):  # the last: a count without precisions
        got = matmul_precision(None, blind)
        assert (got.precision, got.source, got.level) == ("unknown", "unknown", "warning") and "no MFU" in got.why
    # No GEMM at all, counted: the FMA units' float32 work.
    none = matmul_precision(None, _stages({"s": {"by_precision": {}, "by_class": {"gemm": 0}}}))
    assert (none.precision, none.source) == ("fp32", "fallback") and "saw no GEMM" in none.why
    # GEMMs in integers have no FLOP peak: none is taken, even where a dtype is declared.
    ints = matmul_precision("bfloat16", _stages({"s": {"by_precision": {"int64": 128}}}))
    assert (ints.precision, ints.level) == ("unknown", "warning") and "int64" in ints.why


def test_a_workload_without_a_dtype_gets_the_precision_its_matmuls_ran_in(tmp_path):
    out, flops, ceil = tmp_path / "run.json", tmp_path / "flops.json", tmp_path / "ceil.json"
    argv = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--callable", "workloads:gpu_matmuls"]
    argv += ["--args", json.dumps({"device": "cpu", "n": 32, "repeats": 2}), "--out", str(out)]
    argv += ["--flops-out", str(flops), "--ceilings-out", str(ceil)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    run, ceiling = json.loads(out.read_text()), json.loads(ceil.read_text())
    assert json.loads(flops.read_text())["stages"]["prefill"]["by_precision"] == {"bf16": 2 * 2 * 32**3}
    assert (run["dtype"], run["precision"], run["precision_level"]) == ("bfloat16", "bf16", "info")
    assert "not declared" in run["precision_why"]
    # The ceiling multiplies in that dtype, so MFU's denominator is a bf16 rate, never float32's.
    assert (ceiling["dtype"], ceiling["precision"]) == ("bfloat16", "bf16") and ceiling["matmul_flops_per_s"] > 0


_PROBE_WITHOUT_DYNAMO = """
import json, sys
from nsightflow.capture.inside import passes
from nsightflow.workloads import api
w = api.build_workload("nsightflow.workloads.decoder:build", json.loads(sys.argv[1]))
passes.run_profiled(w)
plain = passes.probe_pass(w, "nsightflow", count=True).stages
loaded_by_probe = "torch._dynamo" in sys.modules
import torch._dynamo  # as a process that compiles has it: the probe keeps torch's dynamo guard there
from nsightflow.capture.inside.probe import OpProbe, op_probe
guarded = op_probe(None, None, None)
again = passes.probe_pass(w, "nsightflow", count=True).stages
from torch.utils._python_dispatch import TorchDispatchMode
def raw(self, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))
Plain = type("Plain", (TorchDispatchMode,), {"__torch_dispatch__": raw})  # how torch treats any mode
print(json.dumps({"loaded_by_probe": loaded_by_probe, "torch_guards_modes": Plain.__torch_dispatch__ is not raw,
                  "guarded": type(guarded).__torch_dispatch__ is not OpProbe.__torch_dispatch__,
                  "same_counts": plain == again, "flops": plain["prefill"].flops}))
"""


def test_the_probe_pass_does_not_load_dynamo_unless_the_process_already_has():
    """Loading torch._dynamo cost 2 to 5 s per probing launch (measured on the GPU host), for a guard that
    only matters where compiled code runs; a process that compiles keeps the guard, and counts the same."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE_WITHOUT_DYNAMO, json.dumps(SMALL)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["loaded_by_probe"] is False
    assert got["guarded"] is got["torch_guards_modes"] and got["same_counts"] is True
    assert got["flops"] == _matmuls(16) + _attention(16, 16)


def test_training_backward_counts_twice_the_forward_gemms():
    args = dict(
        batch=2,
        seq=16,
        iterations=2,
        vocab=512,
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_ff=96,
        dtype="float32",
        device="cpu",
    )
    out = passes.count_flops(api.build_workload("nsightflow.workloads.training:build", args)).stages
    # Two iterations of: 2 layers over all 16 positions, then logits for every position (training).
    fwd_gemm = 2 * (2 * 2 * 2 * 16 * (64 * 3 * 64 + 64 * 64 + 64 * 2 * 96 + 96 * 64) + 2 * 2 * 16 * 64 * 512)
    assert out["forward"].by_class["gemm"] == fwd_gemm
    assert out["backward"].by_class["gemm"] == 2 * fwd_gemm  # dX and dW of every matmul
    assert out["backward"].by_class["attention"] == 2 * out["forward"].by_class["attention"]
    assert out["optimizer"].flops == 0 and out["forward"].repeats == 2


def test_steps_run_iteration_major():
    order = []
    wl = api.Workload(
        setup=lambda: None,
        iterations=2,
        stages=[
            api.Stage("f", lambda s: order.append(("f", s))),
            api.Stage("b", lambda s: order.append(("b", s)), repeats=2),
        ],
    )
    passes.run_profiled(wl, warmup=0)
    assert order == [("f", 0), ("b", 0), ("b", 1), ("f", 1), ("b", 2), ("b", 3)]
    assert api.step_counts(wl) == {"f": 2, "b": 4}


def test_probe_opens_windows_around_the_planned_units():
    import torch

    events = []

    def step(_):
        a = torch.ones(4)
        events.append("op0")
        a = a + 1  # operator 1 (ones is operator 0)
        events.append("op1")
        a * 2  # operator 2

    wl = api.Workload(setup=lambda: None, stages=[api.Stage("s", step, repeats=3)])
    win = Windows(
        {("s", 1): {3, 4}, ("s", 2): WHOLE}, start=lambda: events.append("start"), stop=lambda: events.append("stop")
    )
    passes.probe_pass(wl, None, count=False, windows=win)
    # Step 0 is not planned: no window. Step 1: operator 1 (unit 3) and the gap after it (unit 4).
    # Step 2: the whole step in one window.
    assert events == ["op0", "op1", "op0", "start", "op1", "stop", "start", "op0", "op1", "stop"]


def test_views_are_no_units_and_are_neither_marked_nor_counted(monkeypatch):
    # A view (an alias of its input) launches no kernel: the probe numbers, marks and counts only the other operators,
    # in the timeline's launch and in ncu's alike (about half of a decoder's calls are views).
    import nvtx
    import torch

    pushed, events = [], []

    class Recorder:
        def get_event_attributes(self, message):
            return message

        def push_range(self, attrs, payload):
            pushed.append((attrs.split("#")[0], payload))

        def pop_range(self):
            pass

    monkeypatch.setattr(nvtx, "get_domain", lambda name: Recorder())
    x = torch.ones(4, 4)

    def step(_):
        y = x.t()  # a view
        events.append("view")
        z = y + 1  # operator 0 (unit 1)
        events.append("op0")
        z.unsqueeze(0)  # a view
        events.append("view2")
        z * 2  # operator 1 (unit 3)

    wl = api.Workload(setup=lambda: None, stages=[api.Stage("s", step, repeats=2)])
    counts = passes.probe_pass(wl, "t", count=True)
    assert pushed == [("add", 0), ("mul", 1)] * 2
    got = counts.stages["s"]
    assert got.calls == 4
    assert got.bytes_lower_bound == 2 * (4 * 16 * 4)  # add and mul each read 16 float32 and write 16
    win = Windows({("s", 1): {3}}, start=lambda: events.append("start"), stop=lambda: events.append("stop"))
    events.clear()
    passes.probe_pass(wl, None, count=False, windows=win)
    assert events == ["view", "op0", "view2"] * 2 + ["start", "stop"]


@pytest.mark.parametrize("warmup", [1, 2])
def test_ncu_launch_runs_the_warm_up_then_the_windowed_probe_pass_and_no_ranged_pass(tmp_path, warmup):
    # Under ncu every launch outside a window still costs time, so the launch ncu runs has no ranged pass: the
    # workload's setup (one per pass) runs warmup + 1 times there, and warmup + 2 in the timeline's launch (warm-up,
    # ranged pass, counting probe pass).
    log, plan = tmp_path / "passes.txt", tmp_path / "plan.json"
    plan.write_text(json.dumps({"windows": [{"stage": "step", "step": 1, "units": [1]}]}))
    argv = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--callable", "workloads:pass_log"]
    argv += ["--args", json.dumps({"path": str(log)}), "--warmup", str(warmup)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    for extra, runs in (
        (["--windows", str(plan)], warmup + 1),
        (["--flops-out", str(tmp_path / "f.json")], warmup + 2),
    ):
        log.unlink(missing_ok=True)
        proc = subprocess.run(argv + extra, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert log.read_text().count("pass") == runs, proc.stderr


def test_harness_cli_profile_mode_writes_manifest_counts_and_ceilings(tmp_path):
    out, flops, ceil = tmp_path / "run.json", tmp_path / "flops.json", tmp_path / "ceil.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsightflow.capture.inside.harness",
            "--args",
            json.dumps(SMALL),
            "--out",
            str(out),
            "--flops-out",
            str(flops),
            "--ceilings-out",
            str(ceil),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    run = json.loads(out.read_text())
    assert [s["name"] for s in run["stages"]] == ["prefill", "decode"]
    assert (run["dtype"], run["precision"], run["precision_source"], run["precision_level"]) == (
        "float32",
        "fp32",
        "probe",
        "",
    )
    assert len(run["stage_wall_s"]["decode"]) == 3
    assert json.loads(flops.read_text())["stages"]["prefill"]["flops"] == _matmuls(16) + _attention(16, 16)
    ceiling = json.loads(ceil.read_text())
    assert (ceiling["dtype"], ceiling["precision"]) == ("float32", "fp32") and ceiling["matmul_flops_per_s"] > 0


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("no_colon", "package.module:function"),
        ("no_such_module_xyz:build", "importing module"),
        ("nsightflow.workloads.decoder:nope", "no attribute"),
        ("json:dumps", "not a nsightflow.workloads.Workload"),
    ],
)
def test_bad_callables_are_named(spec, needle):
    with pytest.raises(api.WorkloadError, match=needle):
        api.build_workload(spec, {"obj": 1} if spec == "json:dumps" else {})


def test_cli_reports_bad_callable_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "nsightflow.capture.inside.harness", "--callable", "no_such_module_xyz:f"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "importing module 'no_such_module_xyz'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_failing_formula_is_named_and_never_stops_the_workload(monkeypatch):
    import torch
    from torch.utils import flop_counter

    def broken(*args, **kwargs):
        raise AssertionError("shapes are incompatible")

    monkeypatch.setitem(flop_counter.flop_registry, torch.ops.aten.mm, broken)
    ran = []

    def step(_):
        torch.randn(4, 8) @ torch.randn(8, 2)
        ran.append(1)

    got = passes.count_flops(api.Workload(setup=lambda: None, stages=[api.Stage("s", step)])).stages["s"]
    assert ran == [1] and got.flops is None
    assert "mm: AssertionError('shapes are incompatible')" in got.not_counted[0]


def test_bytes_lower_bound_counts_each_tensor_once():
    import torch

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    table, idx = torch.randn(100, 16), torch.tensor([1, 2, 3])
    empty = torch.randn(0, 16)  # a batch of none
    batch = torch.randn(2, 3, 16)  # a linear layer's input: matmul folds it, then reshapes its product (no copy)

    def step(_):
        a @ b  # reads 8x16 + 16x4, writes 8x4 (float32)
        a.t()  # a view: moves nothing
        torch.nn.functional.embedding(idx, table)  # reads 3 rows of 16 and 3 int64 indices, writes 3x16
        empty @ b  # an empty product: reads not even the weight
        batch @ b  # reads 6x16 + 16x4, writes 6x4

    wl = api.Workload(setup=lambda: None, stages=[api.Stage("s", step, repeats=2)])
    got = passes.count_flops(wl).stages["s"]
    per_step = 4 * (8 * 16 + 16 * 4 + 8 * 4) + (4 * 3 * 16 + 8 * 3 + 4 * 3 * 16) + 4 * (6 * 16 + 16 * 4 + 6 * 4)
    assert got.bytes_lower_bound == 2 * per_step
    assert got.flops == 2 * 2 * (8 + 6) * 16 * 4


def test_an_in_place_scatter_counts_the_elements_it_writes_not_its_whole_destination():
    import torch

    from nsightflow.capture.inside import flops

    cache, rows, new = torch.zeros(1000, 16), torch.tensor([5, 7, 9]), torch.randn(3, 16)  # a paged KV cache's write
    acc, where, add = torch.zeros(100, 16), torch.randint(0, 100, (4, 16)), torch.randn(4, 16)
    grid, picked, values = torch.zeros(50, 8, 4), torch.tensor([1, 2, 3]), torch.randn(3, 8, 4)

    def step(_):
        cache.index_copy_(0, rows, new)  # reads 3 int64 indices and 3x16 float32, writes 3x16 of the cache
        acc.scatter_add_(0, where, add)  # reads 4x16 int64 indices and 4x16 float32, reads and writes 4x16 of acc
        grid.index_put_((picked,), values)  # reads 3 indices and 3x8x4 values, writes 3 rows of 8x4

    wl = api.Workload(setup=lambda: None, stages=[api.Stage("s", step)])
    got = passes.count_flops(wl).stages["s"]
    assert got.bytes_lower_bound == (8 * 3 + 4 * 48 + 4 * 48) + (8 * 64 + 4 * 64 + 2 * 4 * 64) + (8 * 3 + 2 * 4 * 96)
    mask = torch.zeros(50, 8, 4, dtype=torch.bool)  # how many a mask picks is in the data: the whole tensor counts
    assert flops.scattered_bytes("index_put_", (grid, [mask], torch.tensor(1.0)), {}) is None


@pytest.mark.parametrize(
    "stages,iterations,needle",
    [
        ([("a", 1), ("a", 2)], 1, "stage name(s) ['a'] used twice"),
        ([("a", 0)], 1, "every stage runs at least once: 'a' repeats 0"),
        ([("a", 1)], 0, "iterations 0"),
    ],
)
def test_workloads_that_cannot_be_reported_truthfully_are_refused(monkeypatch, stages, iterations, needle):
    import types

    mod = types.ModuleType("bad_workloads")
    mod.build = lambda: api.Workload(
        setup=lambda: None, iterations=iterations, stages=[api.Stage(n, lambda s: None, r) for n, r in stages]
    )
    monkeypatch.setitem(sys.modules, "bad_workloads", mod)
    with pytest.raises(api.WorkloadError, match=re.escape(needle)):
        api.build_workload("bad_workloads:build", {})


def test_timed_pass_runs_after_the_warm_up_and_before_the_ranged_pass(tmp_path):
    # Each run of the step sleeps for the time its position says: warm-up 0.0 s, timed pass 0.2 s, ranged pass 0.0 s
    # (tests/workloads.py: pass_durations); the record's program times must be the timed pass's.
    out = tmp_path / "run.json"
    argv = [
        sys.executable,
        "-m",
        "nsightflow.capture.inside.harness",
        "--callable",
        "workloads:pass_durations",
        "--timed",
    ]
    argv += ["--args", json.dumps({"seconds": [0.0, 0.2, 0.0], "repeats": 2}), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(out.read_text())
    assert [round(x, 1) for x in run["program_wall_s"]["step"]] == [0.2, 0.2]
    assert [round(x, 1) for x in run["stage_wall_s"]["step"]] == [0.0, 0.0]


@pytest.mark.parametrize("profiled", [["--timed"], ["--windows", "PLAN"], []])
def test_a_profiled_launch_runs_the_exit_handlers_and_skips_the_interpreters_teardown(tmp_path, profiled):
    # tests/workloads.py: exit_marks writes "atexit" from its exit handler and leaves "teardown" in a buffer only the
    # interpreter's teardown flushes. The timeline's (timed) and ncu's (windowed) launches end without that teardown,
    # which nsys and ncu would wait for; the program alone exits as any program does.
    marks = tmp_path / "marks"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"windows": []}))
    argv = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--callable", "workloads:exit_marks"]
    argv += ["--args", json.dumps({"path": str(marks)}), "--out", str(tmp_path / "run.json")]
    argv += [str(plan) if a == "PLAN" else a for a in profiled]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run.json").read_text())["stages"][0]["name"] == "step"
    assert marks.read_text() == "atexit\n"
    assert (tmp_path / "marks.teardown").read_text() == ("" if profiled else "teardown\n")


def test_a_profiled_launch_that_fails_exits_with_the_harness_status(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "nsightflow.capture.inside.harness",
        "--callable",
        "workloads:stage_raises",
        "--timed",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "CUDA out of memory (simulated by the workload)" in proc.stderr


def test_a_grouped_gemm_call_is_never_the_same_as_another(monkeypatch):
    # Equal calls by shape are one class, except where the work follows the values: a grouped GEMM's offsets (a
    # mixture of experts' tokens per expert) set its groups' sizes, so each of its calls is its own class.
    import torch

    from nsightflow.capture.inside import probe

    seen = []

    class Domain:  # the messages each call's range carries (with no profiler attached, nvtx returns None)
        def get_event_attributes(self, message):
            return message

        def push_range(self, attrs, payload):
            seen.append(attrs)

        def pop_range(self):
            pass

    x, w = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(2, 32, 16, dtype=torch.bfloat16)

    def step(_):
        for offs in ([16, 64], [48, 64]):  # two routings of the same 64 tokens over two experts
            torch._grouped_mm(x, w, offs=torch.tensor(offs, dtype=torch.int32))
            x @ w[0]

    mode = probe.OpProbe("d", None, None)
    mode._nvtx = Domain()
    with mode:
        step(0)
    grouped = [s for s in seen if s.startswith("_grouped_mm#")]
    mm = [s for s in seen if s.startswith("mm#")]
    assert len(grouped) == 2 and grouped[0] != grouped[1]
    assert len(mm) == 2 and mm[0] == mm[1]


@pytest.mark.parametrize(
    "args, work",
    [({}, []), ({"cudnn_benchmark": True}, ["torch.backends.cudnn.benchmark is on"])],
)
def test_the_timeline_launch_records_what_the_first_pass_did_once(tmp_path, args, work):
    # What lets ncu's launch window the program's first pass (nsightflow.capture.launch.program.ncu_launches): on
    # the
    # CPU no device memory is counted, so only torch's own switches speak.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    argv = [
        sys.executable,
        "-m",
        "nsightflow.capture.inside.harness",
        "--callable",
        "workloads:first_use_state",
        "--timed",
    ]
    argv += ["--args", json.dumps(args), "--out", str(tmp_path / "run.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run.json").read_text())["first_pass_work"] == work
    assert f"the first pass's one-time work: {'; '.join(work) or 'none seen'}" in proc.stderr


def test_the_first_pass_work_names_state_kept_beyond_the_libraries_workspaces(monkeypatch):
    for module in ("triton", "torch._dynamo"):  # loaded by other tests of this process; a harness has neither
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert passes.first_pass_work(10, 10 + passes.LIBRARY_ALLOCATIONS) == []
    assert passes.first_pass_work(10, 11 + passes.LIBRARY_ALLOCATIONS) == [
        f"{1 + passes.LIBRARY_ALLOCATIONS} device allocations made in the first pass outlive it"
    ]
    assert passes.first_pass_work(None, 3) == ["CUDA was first used in the first pass"]
    assert passes.first_pass_work(None, None) == []  # no CUDA in use: nothing to count


@pytest.mark.parametrize(
    "spec,args,traced,passes_run",
    [
        # the eager decoder's first pass makes nothing that lasts: the probe pass stands in for the ranged one
        ("nsightflow.workloads.decoder:build", SMALL, "probe", None),
        # a first pass that does one-time work (cuDNN's benchmarking on): the ranged pass runs
        ("workloads:first_use_state", {"cudnn_benchmark": True}, "ranged", None),
        # a library that refuses a dispatch mode: the probe pass stops at its first step, the ranged pass runs after
        ("workloads:mode_averse", {}, "ranged", None),
        # warm-up, timed pass, probe pass: three runs of the step, no ranged pass
        ("workloads:pass_log", {}, "probe", 3),
    ],
)
def test_a_timed_launch_traces_the_probe_pass_alone_where_it_launches_what_the_program_does(
    tmp_path, spec, args, traced, passes_run
):
    out, flops, log = tmp_path / "run.json", tmp_path / "flops.json", tmp_path / "passes.log"
    if spec == "workloads:pass_log":
        args = {"path": str(log), "repeats": 1}
    argv = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--callable", spec, "--args", json.dumps(args)]
    argv += ["--timed", "--out", str(out), "--flops-out", str(flops)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(out.read_text())
    assert run["traced_pass"] == traced
    steps = {s["name"]: s["steps"] for s in run["stages"]}
    assert {k: len(v) for k, v in run["program_wall_s"].items()} == steps  # the timed pass always runs
    if traced == "probe":
        assert run["first_pass_work"] == [] and run["stage_wall_s"] is None
        assert "ranged pass" not in proc.stderr
    else:
        assert {k: len(v) for k, v in run["stage_wall_s"].items()} == steps
    if passes_run is not None:
        assert log.read_text().count("pass") == passes_run, proc.stderr
    # without a probe pass (no count asked for) the ranged pass is the trace, whatever the first pass did
    proc = subprocess.run([a for a in argv if a not in ("--flops-out", str(flops))], capture_output=True, env=env)
    assert proc.returncode == 0 and json.loads(out.read_text())["traced_pass"] == "ranged"
