"""Ready workloads on the CPU (torch backend, real Snakemake): HuggingFace models with grouped-query and
multi-query attention, a training step, the compiled decoder, and a workload that breaks the analytic count.
Expected FLOPs are written out here from each model's shapes."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import copy_workflow, moe_gemm_flops, snakemake

from nsightflow.records import Summary

LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 320,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "vocab_size": 384,
    "max_position_embeddings": 256,
}
# A mixture of experts as transformers runs it (torch._grouped_mm per expert projection in transformers 5): top-2 of 4.
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
# Qwen2-MoE: routed experts (top-2 of 4, grouped GEMMs) beside a shared expert and its sigmoid gate, every layer.
QWEN_MOE = {
    "model_type": "qwen2_moe",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
# DeepSeek-V3's shape: multi-head latent attention (low-rank q and kv projections), a first dense layer, then an MoE
# of routed experts (top-2 of 4) and one shared expert.
DEEPSEEK = {
    "model_type": "deepseek_v3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 16,
    "v_head_dim": 32,
    "n_group": 1,
    "topk_group": 1,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
TINY = {"vocab": 256, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 48, "dtype": "float32", "device": "cpu"}
HF = {"batch": 2, "prompt": 16, "decode_steps": 3, "dtype": "float32", "device": "cpu"}


def hf_flops(c, batch, tokens, past):
    """One forward of a Llama-style model over ``tokens`` new tokens after ``past`` cached ones, logits of the
    last position only: (GEMM FLOPs, FLOPs of the rotary angles, attention FLOPs in full)."""
    h, i, layers, hq, hkv, v = (
        c["hidden_size"],
        c["intermediate_size"],
        c["num_hidden_layers"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["vocab_size"],
    )
    hd = h // hq
    per_token = h * h + 2 * h * hkv * hd + h * h + 3 * h * i  # q, k, v, o, gate, up, down (MACs)
    gemm = 2 * batch * tokens * per_token * layers + 2 * batch * h * v
    # transformers computes the rotary angles as inv_freq (hd/2 x 1) @ positions (1 x tokens) up to 5.17, as an
    # elementwise product in later versions: a matmul of these FLOPs, or none.
    rotary = 2 * (hd // 2) * tokens
    attention = layers * 2 * batch * hq * tokens * (past + tokens) * 2 * hd  # Q·Kᵀ and P·V, every query head
    return gemm, rotary, attention


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("workloads"))
    cfg = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    cfg["profiler"] = "torch"
    cfg["workloads"] = [
        {"name": "llama", "callable": "nsightflow.workloads.hf:build", "args": {**HF, "config": LLAMA}},
        {"name": "qwen2", "callable": "nsightflow.workloads.hf:build", "args": {**HF, "config": QWEN2}},
        {"name": "mixtral", "callable": "nsightflow.workloads.hf:build", "args": {**HF, "config": MIXTRAL}},
        {"name": "qwen_moe", "callable": "nsightflow.workloads.hf:build", "args": {**HF, "config": QWEN_MOE}},
        {"name": "deepseek", "callable": "nsightflow.workloads.hf:build", "args": {**HF, "config": DEEPSEEK}},
        {
            "name": "train",
            "callable": "nsightflow.workloads.training:build",
            "args": {**TINY, "batch": 2, "seq": 16, "iterations": 2},
        },
        {
            "name": "compiled",
            "callable": "nsightflow.workloads.decoder:build",
            "args": {**TINY, "batch": 2, "prompt": 16, "decode_steps": 2, "compile": True},
        },
        {"name": "averse", "callable": "workloads:mode_averse"},
        {"name": "custom", "callable": "workloads:custom_matmul"},
        {
            "name": "hftrain",
            "callable": "nsightflow.workloads.training:build",
            "args": {"config": LLAMA, "batch": 2, "seq": 16, "iterations": 2, "dtype": "float32", "device": "cpu"},
        },
    ]
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**__import__("os").environ, "PYTHONPATH": str(wf / "tests")}
    snakemake(wf, "--cores", "2", "results/report.html", env=env)
    return wf / "results"


def _stages(runs, name):
    return pd.read_csv(runs / name / "stages.csv").set_index("stage")


@pytest.mark.parametrize("name,config", [("llama", LLAMA), ("qwen2", QWEN2)])
def test_huggingface_models_with_grouped_and_multi_query_attention(runs, name, config):
    st = _stages(runs, name)
    gemm, rotary, att = hf_flops(config, 2, 16, 0)
    got = st.loc["prefill", "flops_analytic_gemm"]
    assert got in (gemm, gemm + rotary)
    assert st.loc["prefill", "flops_analytic_attention"] == att
    kept = 16 * 17 // 2  # causal prefill: query i sees keys 0..i
    assert st.loc["prefill", "flops_analytic_causal"] == got + att * kept // (16 * 16)
    decode = [hf_flops(config, 2, 1, 16 + s) for s in range(3)]
    total = sum(g + a for g, _, a in decode)
    assert st.loc["decode", "flops_analytic"] in (total, total + sum(r for _, r, _ in decode))
    assert (st["mfu_busy"] > 0).all() and (st["wall_ms"] > 0).all()
    manifest = json.loads((runs / name / "manifest.json").read_text())
    assert manifest["params"]["num_key_value_heads"] == config["num_key_value_heads"]
    assert (runs / name / "report.html").exists()


def test_a_mixture_of_experts_counts_each_routed_token_once_per_expert(runs):
    """Every token goes to top-k experts, so the experts' GEMMs do k times a dense MLP's work, however the router
    splits the tokens: the count from the config alone, whatever the routing (and however transformers runs the
    experts: one grouped GEMM per projection, or one GEMM per expert)."""
    hd = MIXTRAL["hidden_size"] // MIXTRAL["num_attention_heads"]

    def gemm(batch, tokens):
        return moe_gemm_flops(MIXTRAL, batch, tokens)

    st = _stages(runs, "mixtral")
    rotary = 2 * (hd // 2)  # per token: see hf_flops
    assert st.loc["prefill", "flops_analytic_gemm"] in (gemm(2, 16), gemm(2, 16) + rotary * 16)
    assert st.loc["decode", "flops_analytic_gemm"] in (3 * gemm(2, 1), 3 * gemm(2, 1) + 3 * rotary)
    assert (st["mfu_busy"] > 0).all()


def moe_gemm(per_token: int, batch: int, tokens: int, hidden: int, vocab: int) -> int:
    """GEMM FLOPs of one forward over ``tokens`` new tokens: ``per_token`` multiply-adds a token over all layers,
    and the LM head on the last position only."""
    return 2 * batch * tokens * per_token + 2 * batch * hidden * vocab


def qwen_moe_macs(c: dict) -> int:
    """Multiply-adds a token of a Qwen2-MoE config, every layer: attention's projections, the router, the shared
    expert's gate and the shared expert, and top-k routed experts (whatever the routing)."""
    h, kv, hd = c["hidden_size"], c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"]
    attention = h * h + 2 * h * kv * hd + h * h  # q, k, v, o
    shared = h * 1 + 3 * h * c["shared_expert_intermediate_size"]
    routed = h * c["num_experts"] + c["num_experts_per_tok"] * 3 * h * c["moe_intermediate_size"]
    return c["num_hidden_layers"] * (attention + shared + routed)


def deepseek_gemm(d: dict, batch: int, tokens: int, past: int) -> int:
    """GEMM FLOPs of one forward of a DeepSeek-V3-shaped config of two layers over ``tokens`` new tokens after
    ``past`` cached ones: latent attention's low-rank projections in both layers, a dense MLP first, then the router,
    top-k routed and the shared experts; the LM head on the last position. transformers caches the compressed
    latent, so its key/value up-projection runs over every cached token again at each step."""
    h, heads = d["hidden_size"], d["num_attention_heads"]
    qk = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    latent = (
        h * d["q_lora_rank"]  # q down
        + d["q_lora_rank"] * heads * qk  # q up
        + h * (d["kv_lora_rank"] + d["qk_rope_head_dim"])  # kv down, with the shared rotary key
        + heads * d["v_head_dim"] * h  # o
    )
    kv_up = d["kv_lora_rank"] * heads * (d["qk_nope_head_dim"] + d["v_head_dim"])  # over the whole cache
    experts = d["num_experts_per_tok"] + d["n_shared_experts"]
    moe = h * d["n_routed_experts"] + experts * 3 * h * d["moe_intermediate_size"]
    per_token = 2 * latent + 3 * h * d["intermediate_size"] + moe
    return 2 * batch * (tokens * per_token + 2 * (past + tokens) * kv_up) + 2 * batch * h * d["vocab_size"]


def test_qwen_moe_and_deepseek_style_experts_count_shared_and_routed_experts(runs):
    """Model FLOPs from the configs alone: every token through the shared expert (and Qwen's gate for it) and its
    top-k routed experts, whatever the routing; DeepSeek-V3's latent attention through its low-rank projections, its
    first layer dense. experts.csv: one routing per MoE layer and step, top-k tokens each."""
    h = QWEN_MOE["hidden_size"]
    expected = {
        "qwen_moe": (
            moe_gemm(qwen_moe_macs(QWEN_MOE), 2, 16, h, 512),
            3 * moe_gemm(qwen_moe_macs(QWEN_MOE), 2, 1, h, 512),
        ),
        "deepseek": (deepseek_gemm(DEEPSEEK, 2, 16, 0), sum(deepseek_gemm(DEEPSEEK, 2, 1, 16 + s) for s in range(3))),
    }
    for name, layers in (("qwen_moe", 2), ("deepseek", 1)):
        st = _stages(runs, name)
        assert st.loc["prefill", "flops_analytic_gemm"] == expected[name][0], name
        assert st.loc["decode", "flops_analytic_gemm"] == expected[name][1], name
        table = pd.read_csv(runs / name / "experts.csv")
        for stage, steps, tokens in (("prefill", 1, 16), ("decode", 3, 1)):
            rows = table[table["stage"] == stage]
            assert len(rows) == steps * layers and (rows["tokens"] == 2 * tokens * 2).all(), name


def test_a_mixture_of_experts_routing_is_the_routers(runs):
    """experts.csv: per step, one routing per MoE layer, every token sent to top-k of the experts; in prefill, each
    expert's tokens are those the model's own router picked (its top-k over its logits, hooked in a second run of
    the same seeded workload)."""
    from nsightflow.workloads import api

    table = pd.read_csv(runs / "mixtral" / "experts.csv")
    layers, k, e = MIXTRAL["num_hidden_layers"], MIXTRAL["num_experts_per_tok"], MIXTRAL["num_local_experts"]
    for stage, steps, tokens in (("prefill", 1, 16), ("decode", 3, 1)):
        rows = table[table["stage"] == stage]
        assert len(rows) == steps * layers and set(rows["layer"]) == set(range(layers))
        assert (rows["experts"] == e).all() and (rows["tokens"] == 2 * tokens * k).all()
        per = rows["tokens_per_expert"].str.split().map(lambda t: [int(x) for x in t])
        assert (per.map(sum) == rows["tokens"]).all()
        assert np.allclose(rows["imbalance"], per.map(lambda t: max(t) / (sum(t) / len(t))))
    wl = api.build_workload("nsightflow.workloads.hf:build", {**HF, "config": MIXTRAL})
    picked = []

    def hook(module, _, out):  # the router's logits (transformers 5: a router module returning them first)
        if "Router" in type(module).__name__:
            logits = out[0] if isinstance(out, tuple) else out
            top = torch.topk(logits.reshape(-1, e).float().softmax(-1), k, dim=-1).indices
            picked.append(torch.bincount(top.flatten(), minlength=e).tolist())

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        wl.setup()
        next(s for s in wl.stages if s.name == "prefill").fn(0)
    finally:
        handle.remove()
    prefill = table[(table["stage"] == "prefill") & (table["step"] == 0)].sort_values("layer")
    assert [list(map(int, t.split())) for t in prefill["tokens_per_expert"]] == picked
    page = (runs / "mixtral" / "report.html").read_text()
    assert "Experts (mixture of experts)" in page and "tokens per expert" in page
    st = _stages(runs, "mixtral")
    assert (st["expert_gemm_share"] > 0).all() and (st["expert_gemm_flop_rate"] > 0).all()


def test_an_operator_without_a_formula_is_named_and_the_rest_counted(runs):
    """A custom operator doing a matmul: the model count has no formula for it and says so (stages.csv, the notes,
    the page), and still counts the plain matmul beside it (2·n³ a step, two steps)."""
    st = _stages(runs, "custom")
    assert st.loc["step", "not_counted_ops"] == "nsf_workloads.fused_mm (2 calls)"
    assert st.loc["step", "flops_analytic"] == 2 * 2 * 64**3 and st.loc["step", "mfu_busy"] > 0
    notes = Summary.read(runs / "custom" / "summary.json").notes()
    assert any("no FLOP formula for nsf_workloads.fused_mm (2 calls), so MFU leaves their work out" in n for n in notes)
    assert "register_flop_formula" in (runs / "custom" / "report.html").read_text()


def test_training_step_counts_backward_as_twice_the_forward_gemms(runs):
    st = _stages(runs, "train")
    assert list(st.index) == ["forward", "backward", "optimizer"] and (st["range_instances"] == 2).all()
    b, t, d, f, v = 2, 16, 32, 48, 256
    fwd = 2 * (2 * b * t * (d * 3 * d + d * d + d * 2 * f + f * d) + 2 * b * t * d * v)  # 2 iterations, 1 layer
    assert st.loc["forward", "flops_analytic_gemm"] == fwd
    assert st.loc["backward", "flops_analytic_gemm"] == 2 * fwd
    assert st.loc["optimizer", "flops_analytic"] == 0


def test_training_step_of_a_huggingface_model(runs):
    st = _stages(runs, "hftrain")
    assert list(st.index) == ["forward", "backward", "optimizer"] and (st["range_instances"] == 2).all()
    # Training computes logits at every position: the LM head on all 16 tokens, not the last one only.
    gemm, rotary, att = hf_flops(LLAMA, 2, 16, 0)
    gemm += 2 * 2 * 15 * LLAMA["hidden_size"] * LLAMA["vocab_size"]
    assert st.loc["forward", "flops_analytic_gemm"] in (2 * gemm, 2 * (gemm + rotary))  # 2 iterations
    assert st.loc["forward", "flops_analytic_attention"] == 2 * att
    # Backward: each matmul's input and weight gradients (the rotary angles need none).
    assert st.loc["backward", "flops_analytic_gemm"] == 2 * 2 * gemm
    assert (st.loc[["forward", "backward"], "mfu_busy"] > 0).all()
    assert (runs / "hftrain" / "report.html").exists()


def test_compiled_decoder_reports_the_model_flops(runs):
    st = _stages(runs, "compiled")
    b, t, d, f, v, h = 2, 16, 32, 48, 256, 2

    def matmuls(tokens):
        return 2 * b * tokens * (d * 3 * d + d * d + d * 2 * f + f * d) + 2 * b * d * v

    assert st.loc["prefill", "flops_analytic"] == matmuls(t) + 2 * b * h * t * t * 2 * (d // h)
    assert st.loc["decode", "flops_analytic"] == sum(
        matmuls(1) + 2 * b * h * (t + s + 1) * 2 * (d // h) for s in range(2)
    )
    assert (st["gpu_busy_ms"] > 0).all()
    assert json.loads((runs / "compiled" / "manifest.json").read_text())["params"]["compile"] is True


def test_a_failed_count_never_removes_a_measured_number(runs):
    st = _stages(runs, "averse")
    assert st.loc["prefill", "wall_ms"] > 0 and st.loc["prefill", "gpu_busy_ms"] > 0
    assert pd.isna(st.loc["prefill", "flops_analytic"]) and pd.isna(st.loc["prefill", "mfu_busy"])
    notes = Summary.read(runs / "averse" / "summary.json").notes()
    assert any(
        "no analytic FLOPs (so no MFU): the counting pass (the workload run again under a TorchDispatchMode" in n
        and "does not run under a dispatch mode" in n
        for n in notes
    )
    assert "does not run under a dispatch mode" in (runs / "averse" / "report.html").read_text()


def test_a_checkpoint_directory_is_a_workload(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    from nsightflow.capture.inside import passes
    from nsightflow.workloads import api

    cfg = dict(LLAMA)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type"), **cfg))
    model.save_pretrained(tmp_path / "ckpt")
    wl = api.build_workload("nsightflow.workloads.hf:build", {**HF, "model": str(tmp_path / "ckpt")})
    got = passes.count_flops(wl).stages["prefill"]
    gemm, rotary, _ = hf_flops(LLAMA, 2, 16, 0)
    assert got.by_class["gemm"] in (gemm, gemm + rotary)
    with pytest.raises(api.WorkloadError, match="no HuggingFace checkpoint could be loaded from"):
        api.build_workload("nsightflow.workloads.hf:build", {**HF, "model": str(tmp_path / "nowhere")})
    with pytest.raises(api.WorkloadError, match="either `model`"):
        api.build_workload("nsightflow.workloads.hf:build", HF)


def test_the_readmes_own_workload_example_runs(tmp_path):
    """The README's `mypackage/profiling.py`, as written there, counted by the probe pass on this machine."""
    import re

    from conftest import ROOT

    from nsightflow.capture.inside import passes
    from nsightflow.workloads import api

    text = (ROOT / "README.md").read_text()
    code = re.search(r"`mypackage/profiling.py`:\n\n```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "mypackage").mkdir()
    (tmp_path / "mypackage" / "__init__.py").write_text("")
    (tmp_path / "mypackage" / "profiling.py").write_text(code)
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        wl = api.build_workload("mypackage.profiling:build", {"size": 6})
        got = passes.count_flops(wl).stages["forward"]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mypackage.profiling", None)
        sys.modules.pop("mypackage", None)
    assert got.repeats == 4 and got.by_class["gemm"] == 4 * 2 * 64 * 64 * 64  # four 64x64 by 64x64 matmuls
