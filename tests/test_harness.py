"""The built-in workload on the CPU: FLOP counting against the model's own arithmetic, and bad callables."""

import json
import subprocess
import sys

import pytest

from nsightflow import harness

SMALL = dict(batch=2, prompt=16, decode_steps=3, vocab=512, d_model=64, n_layers=2, n_heads=4, d_ff=96,
             dtype="float32", device="cpu")


def test_flops_match_the_model_arithmetic():
    out = harness.count_flops(harness.build_workload("nsightflow.decoder:build", SMALL))
    b, t, d, f, v, n = 2, 16, 64, 96, 512, 2

    def matmuls(tokens):  # per layer: qkv, proj, gate_up, down; then the LM head on the last position
        return n * 2 * b * tokens * (d * 3 * d + d * d + d * 2 * f + f * d) + 2 * b * 1 * d * v

    # On the CPU the attention op itself is not counted by FlopCounterMode (only matmuls are).
    assert out["stages"]["prefill"]["flops"] == matmuls(t)
    assert out["stages"]["decode"]["flops"] == 3 * matmuls(1)
    assert out["stages"]["prefill"]["causal_masked_flops"] == 0


def test_harness_cli_profile_mode_writes_manifest(tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "nsightflow.harness", "--args", json.dumps(SMALL), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(out.read_text())
    assert [s["name"] for s in run["stages"]] == ["prefill", "decode"]
    assert len(run["stage_wall_s"]["decode"]) == 3


@pytest.mark.parametrize("spec,needle", [
    ("no_colon", "package.module:function"),
    ("no_such_module_xyz:build", "importing module"),
    ("nsightflow.decoder:nope", "no attribute"),
    ("json:dumps", "not a nsightflow.harness.Workload"),
])
def test_bad_callables_are_named(spec, needle):
    with pytest.raises(harness.WorkloadError, match=needle):
        harness.build_workload(spec, {"obj": 1} if spec == "json:dumps" else {})


def test_cli_reports_bad_callable_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "nsightflow.harness", "--callable", "no_such_module_xyz:f"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "importing module 'no_such_module_xyz'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bytes_lower_bound_counts_each_tensor_once():
    import torch

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    table, idx = torch.randn(100, 16), torch.tensor([1, 2, 3])

    def step(_):
        a @ b                        # reads 8x16 + 16x4, writes 8x4 (float32)
        a.t()                        # a view: moves nothing
        torch.nn.functional.embedding(idx, table)  # reads 3 rows of 16 and 3 int64 indices, writes 3x16

    wl = harness.Workload(setup=lambda: None, stages=[harness.Stage("s", step, repeats=2)])
    got = harness.count_flops(wl)["stages"]["s"]
    per_step = 4 * (8 * 16 + 16 * 4 + 8 * 4) + (4 * 3 * 16 + 8 * 3 + 4 * 3 * 16)
    assert got["bytes_lower_bound"] == 2 * per_step
    assert got["flops"] == 2 * 2 * 8 * 16 * 4
