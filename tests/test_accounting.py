"""Every FLOP accounted (CPU tier): an MoE's routing and expert GEMMs measured, operators without a FLOP formula named
with what they executed, precisions collected for the kernels that run, and padding said only on evidence.

Expected values come from the workloads' own shapes and seeded routing, or from the recorded H200 capture's numbers
before an edit."""

import dataclasses
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DATA, aggregate_recorded, torch_harness_run
from workloads import routing

from nsightflow import ncu_metrics
from nsightflow.analysis.diagnostics import flop_notes
from nsightflow.capture.inside.flops import Tally
from nsightflow.capture.inside.probe import op_probe
from nsightflow.records import AnalyticCounts

EXPERTS = {"tokens": 256, "hidden": 64, "ffn": 96, "experts": 4, "device": "cpu", "dtype": "float32", "steps": 2}


def test_an_moes_routing_and_expert_gemms_are_measured_on_a_cpu(tmp_path):
    """The grouped GEMM's tokens per expert, step by step, are the workload's seeded routing; its time is the
    stage's busy time (the only operator), its FLOP rate 2·T·H·F per step over that time."""
    agg = torch_harness_run(tmp_path, "workloads:grouped_experts", EXPERTS)
    want = routing(EXPERTS["tokens"], EXPERTS["experts"]).tolist()
    table = agg.experts
    assert list(table["step"]) == [0, 1] and list(table["layer"]) == [0, 0]
    assert [list(map(int, t.split())) for t in table["tokens_per_expert"]] == [want, want]
    assert (table["tokens"] == EXPERTS["tokens"]).all() and (table["experts"] == 4).all()
    assert table["imbalance"].iloc[0] == pytest.approx(max(want) / (sum(want) / len(want)))
    assert table["idle_experts"].iloc[0] == sum(t == 0 for t in want)
    st = agg.stages.set_index("stage").loc["experts"]
    flops = 2 * EXPERTS["tokens"] * EXPERTS["hidden"] * EXPERTS["ffn"] * EXPERTS["steps"]
    assert st["flops_analytic"] == flops
    assert 0.5 < st["expert_gemm_share"] <= 1.0  # the stage's one operator, its children's time included
    assert st["expert_gemm_flop_rate"] == pytest.approx(flops / (st["expert_gemm_ms"] * 1e-3), rel=1e-9)
    assert st["expert_imbalance"] == pytest.approx(max(want) / (sum(want) / len(want)))


def _count(body):
    """The analytic count of one stage step that ``body`` runs (the probe pass's tally)."""
    tally = Tally()
    with op_probe(None, tally, None):
        tally.begin("s")
        body()
        tally.end()
    return tally.result().stages["s"]


def test_the_count_records_padding_evidence_and_each_routing_once():
    """Dimensions that are not multiples of the largest tiles (256 GEMM rows, 128 attention queries and keys) are
    evidence of padding, and bound it: a 2-row GEMM, one query against 40 keys, experts of 10 to 216 tokens; a
    256x32x256 GEMM is not. Two grouped GEMMs sharing one offsets tensor (a layer's gate/up and down projections) are
    one routing; a new offsets tensor (the next layer) another."""
    x, w = torch.randn(256, 32), torch.randn(4, 32, 16)
    offs = torch.tensor([10, 20, 40, 256], dtype=torch.int32)
    q = torch.randn(2, 4, 1, 16)
    kv = torch.randn(2, 4, 40, 16)

    def body():
        torch.mm(torch.randn(2, 32), torch.randn(32, 96))  # a decode step's GEMM: 2 rows
        torch.mm(torch.randn(256, 32), torch.randn(32, 256))  # whole tiles: no padding
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv)
        torch._grouped_mm(x, w, offs=offs)
        torch._grouped_mm(x, w, offs=offs)  # the same layer's second projection
        torch._grouped_mm(x, w, offs=offs.clone())  # the next layer

    got = _count(body)
    small = 2 * 2 * 32 * 96
    assert got.padded["aten.mm"] == {"calls": 1, "flops": small, "padded": 2 * 256 * 32 * 256, "shape": "mm 2x32x96"}
    grouped = got.padded["aten._grouped_mm"]
    assert grouped["shape"] == "_grouped_mm 10 to 216 tokens an expert" and grouped["calls"] == 3
    assert grouped["flops"] == 3 * 2 * 256 * 32 * 16 and grouped["padded"] == 3 * 2 * (4 * 256) * 32 * 16
    attention = next(v for k, v in got.padded.items() if "attention" in k)
    full = 2 * 2 * 4 * 1 * 40 * (16 + 16)  # Q·Kᵀ and P·V, every (query, key) pair
    assert attention["flops"] == full and attention["padded"] == 2 * 2 * 4 * 128 * 128 * 32
    assert attention["shape"].endswith("1 queries x 40 keys")
    whole = 2 * 256 * 32 * 256
    assert got.tile_bound == whole + sum(v["padded"] for v in got.padded.values())
    assert got.routing == [[[10, 10, 20, 216], [10, 10, 20, 216]]]


def test_an_operator_without_a_formula_is_listed_and_a_registered_one_counted():
    """A custom operator named like matrix work has no formula: the count lists it (its FLOPs are missing from the
    model's) and keeps counting the rest; once a formula is registered with torch's flop_counter, it is counted."""
    from torch.utils.flop_counter import register_flop_formula

    @torch.library.custom_op("nsf_accounting::fused_mm", mutates_args=())
    def fused_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    @torch.library.custom_op("nsf_accounting::counted_mm", mutates_args=())
    def counted_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    @register_flop_formula(torch.ops.nsf_accounting.counted_mm)
    def _(a_shape, b_shape, *_, **__):
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]

    a, b = torch.randn(64, 32), torch.randn(32, 48)

    def body():
        fused_mm(a, b)
        fused_mm(a, b)
        counted_mm(a, b)
        torch.mm(a, b)
        torch.add(a, 1)  # elementwise: not matrix work, never listed

    got = _count(body)
    assert got.no_formula == {"nsf_accounting.fused_mm": 2}
    assert got.by_op == {"nsf_accounting.counted_mm": 2 * 64 * 32 * 48, "aten.mm": 2 * 64 * 32 * 48}
    assert got.flops == 2 * 2 * 64 * 32 * 48 and got.counted  # the rest is counted, MFU kept for it


def _without_mm(src, dst):
    """The recorded run with the analytic count's ``aten.mm`` taken out: as if mm had no formula."""
    shutil.copytree(src, dst)
    data = json.loads((src / "analytic_flops.json").read_text())
    for s in data["stages"].values():
        mm = s["by_op"].pop("aten.mm")
        for key in ("flops", "flops_causal_adjusted"):
            s[key] -= mm
        s["by_class"]["gemm"] -= mm
        if s.get("by_precision"):
            s["by_precision"]["bf16"] -= mm
    (dst / "analytic_flops.json").write_text(json.dumps(data))
    return dst


def test_what_an_operator_without_a_formula_executed_is_named_not_blamed_on_padding(tmp_path):
    """The recorded H200 decoder with its GEMMs' formula taken out: each stage names mm as not counted, with the
    tensor FLOPs its kernels executed (the cuBLAS kernels' tensor FLOPs in the same capture's kernel table), and the
    gap between executed and model FLOPs is put on it, not on padding."""
    before = aggregate_recorded(DATA / "h200_v2" / "default")
    assert (before.stages["flops_not_counted"] == 0).all() and (before.stages["not_counted_ops"] == "").all()
    after = aggregate_recorded(_without_mm(DATA / "h200_v2" / "default", tmp_path / "run"))
    st = after.stages.set_index("stage")
    k = before.kernels
    for stage in ("prefill", "decode"):
        cublas = k[(k["stage"] == stage) & k["kernel"].str.startswith("nvjet_")]["flops_tensor"].sum()  # mm's kernels
        assert st.loc[stage, "flops_not_counted"] == pytest.approx(cublas, rel=1e-9)
        assert st.loc[stage, "not_counted_ops"].startswith("mm (")
    said = [n.message for n in after.notes if n.source == "prefill"]
    left = st.loc["prefill", "flops_not_counted"] / st.loc["prefill", "flops_tensor_measured"]
    assert any("no FLOP formula for mm" in m and f"{left:.1%} of the stage's executed tensor FLOPs" in m for m in said)
    assert any("come from operators the model count has no formula for" in m for m in said)
    assert not any("pad" in m for m in said)


def test_padding_is_said_only_with_the_counts_evidence():
    """The recorded decode step executed 3.6x its model FLOPs. Where the count's GEMMs, rounded up to the largest
    tiles, could execute that much, the note says padding and names the shape; where they could not (a bound of
    1.1x), it says that neither padding nor a missing formula explains it; with a count too old to record shapes,
    that it cannot tell."""
    agg = aggregate_recorded(DATA / "h200_v2" / "default")
    decode = agg.stages.set_index("stage").loc["decode"].copy()
    decode["stage"] = "decode"
    count = AnalyticCounts.read(DATA / "h200_v2" / "default" / "analytic_flops.json").stages["decode"]
    assert count.padded is None and count.tile_bound is None  # recorded before the count looked for padding
    ratio, model = decode["executed_over_model"], decode["flops_analytic_causal"]
    assert ratio > 1.2
    mm = count.by_op["aten.mm"]
    evidence = {"aten.mm": {"calls": 8 * 28, "flops": mm, "padded": 64 * mm, "shape": "mm 4x2048x6144"}}
    padded = flop_notes(decode, dataclasses.replace(count, padded=evidence, tile_bound=64 * mm))[-1].message
    assert f"executed {ratio:.2f}x" in padded and "mm 4x2048x6144" in padded and "padding:" in padded
    assert f"come to {64 * mm / model:.2f}x the model's FLOPs" in padded
    tight = dataclasses.replace(count, padded=evidence, tile_bound=1.1 * model)
    none = flop_notes(decode, tight)[-1].message
    assert "neither padding nor a missing formula explains it" in none and "1.10x the model's FLOPs at most" in none
    old = flop_notes(decode, count)[-1].message
    assert "cannot be told" in old


def test_precisions_follow_matrix_kernels_of_operators_without_a_formula():
    """The recorded H100 plan collects bf16 alone: its GEMMs are mm's. A cuBLAS kernel launched by an operator the
    count has no formula for (the same plan, its operator renamed), or a stage whose count lists such an operator,
    makes every precision collected: nobody saw what precision it ran in."""
    run = DATA / "h100_probe"
    plan = json.loads((run / "plan.json").read_text())
    analytic = AnalyticCounts.read(run / "analytic_flops.json")
    launches = [(e["stage"], int(e["unit"]), str(e["class_key"]), str(e["kernel"])) for e in plan["expected"]]
    assert ncu_metrics.seen_precisions(analytic, launches)[0] == ["bf16"]
    gemm = next(i for i, (_, unit, key, kernel) in enumerate(launches) if key.startswith("mm#") and "nvjet" in kernel)
    stage, unit, key, kernel = launches[gemm]
    renamed = [*launches[:gemm], (stage, unit, "fused_mm" + key[2:], kernel), *launches[gemm + 1 :]]
    seen, how = ncu_metrics.seen_precisions(analytic, renamed)
    assert seen is None and "fused_mm, which has no formula" in how[0]
    assert ncu_metrics.tensor_precisions("auto", seen) == ncu_metrics.ALL_PRECISIONS
    # An elementwise kernel of such an operator does no matrix work: the precisions stay those seen.
    elementwise = next(i for i, (_, unit, key, kernel) in enumerate(launches) if "elementwise" in kernel)
    stage, unit, key, kernel = launches[elementwise]
    other = [*launches[:elementwise], (stage, unit, "my_op#0#0|x", kernel), *launches[elementwise + 1 :]]
    assert ncu_metrics.seen_precisions(analytic, other)[0] == ["bf16"]
    listed = dataclasses.replace(analytic.stages[stage], no_formula={"mylib.fused_mm": 2})
    marked = dataclasses.replace(analytic, stages={**analytic.stages, stage: listed})
    assert ncu_metrics.seen_precisions(marked, launches)[0] is None


def test_matrix_kernels_by_name_on_real_kernel_names():
    """Which real kernels (tests/data/kernel_names: the GPU host's captures, nsys's and ncu's names) are named like
    matrix work, the names whose precision is unknown when an operator without a formula launched them. Every cuBLAS,
    CUTLASS, cuDNN-attention and FlashAttention kernel is; the fused Adam step (its functor FusedAdamMathFunctor), the
    layer-norm backward (GammaBetaBackward) and inductor's pointwise and reduction kernels, named after the operators
    they fuse, are not: each of those asked for every precision and started ncu twice on the H200."""
    import csv
    import re

    names = list(csv.DictReader((DATA / "kernel_names" / "names.csv").open()))
    matrix = re.compile(r"nvjet|cutlass|Kernel2|device_kernel|sdpa|flash|fmha|xmma|gemv|splitKreduce", re.I)
    for row in names:  # a plan's kernel is nsys's name; the family by ncu's short name or nsys's
        name, want = (
            row["nsys_demangled"],
            bool(matrix.search(row["ncu_function"]) or matrix.search(row["nsys_demangled"])),
        )
        assert bool(ncu_metrics.MATRIX_KERNEL.search(name)) == want or "prepare_grouped_gemm" in name, name[:120]
    assert sum(bool(ncu_metrics.MATRIX_KERNEL.search(r["nsys_demangled"])) for r in names) >= 50
    fused_adam = [r["nsys_demangled"] for r in names if "FusedAdamMathFunctor" in r["nsys_demangled"]]
    assert fused_adam and not any(ncu_metrics.MATRIX_KERNEL.search(n) for n in fused_adam)
    fused = "triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_index_mm_mul_scalar_tensor_"
    assert not ncu_metrics.MATRIX_KERNEL.search(
        fused + "select_split_with_sizes_stack_sub_transpose_unsqueeze_view_where_4"
    )
    assert ncu_metrics.MATRIX_KERNEL.search("triton_tem_fused_mm_0") and ncu_metrics.MATRIX_KERNEL.search(
        "sm90_wgmma_x"
    )


def test_a_stage_without_experts_has_no_expert_numbers():
    agg = aggregate_recorded(DATA / "h200_v2" / "default")
    assert agg.experts.empty
    cols = ["expert_gemm_ms", "expert_gemm_share", "expert_gemm_flop_rate", "expert_imbalance"]
    assert agg.stages[cols].isna().all().all()
    assert isinstance(agg.experts, pd.DataFrame) and np.isnan(agg.stages["expert_gemm_ms"]).all()
