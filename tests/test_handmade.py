"""Captures made by hand, the NVTX guide's way, analysed with ``--config captures=DIR`` on the CPU.

tests/data/handmade (recorded on the H200 with benchmarks/gpu_record.py handmade; commands.log has every
command): a program with its own ranges in NVTX domain ``LLM`` named ``LLM@<stage>``, captured with
``nsys profile`` (+ ``nsys stats`` and the SQLite export) and ``ncu --nvtx --nvtx-include "regex:LLM@.*/"``
with ncu's default demangled names:
- ``train``: a HuggingFace Llama training step with fused AdamW (forward, backward, optimizer);
- ``moe``: a HuggingFace Mixtral (8 experts, top 2) prefill and 3 decode steps, the steps as ``LLM@decode_step``
  ranges inside one ``LLM@decode_all`` range; CUB pushes ranges of its own domain (CCCL) inside them;
- ``decoder``: the built-in decoder named the same way, nsys only.
Expected values come from the raw files: ncu's counter cells summed per range by the NVTX cell each
result carries, and nsys stats' own range totals.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict

import pandas as pd
import pytest
from conftest import DATA, EVERY_CLASS, copy_workflow, snakemake

from nsightflow.records import Summary

HANDMADE = DATA / "handmade"
BF16 = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
DRAM = ("dram__bytes_read.sum", "dram__bytes_write.sum")


def _cell_sums(export) -> dict[str, dict[str, float]]:
    """Per innermost LLM range on each result's NVTX stack: bf16 tensor FLOPs and DRAM bytes, summed from
    the raw cells (plain csv; nothing of nsightflow's)."""
    rows = list(csv.reader(export.open()))
    header, body = rows[0], rows[2:]
    nvtx = next(i for i, h in enumerate(header) if "Push/Pop" in h)
    col = {h: i for i, h in enumerate(header)}
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"bf16": 0.0, "dram": 0.0, "results": 0})
    for r in body:
        llm = re.findall(r'"LLM:([^:"]+):', r[nvtx])
        stage = llm[-1]
        out[stage]["bf16"] += float(r[col[BF16]].replace(",", ""))
        out[stage]["dram"] += sum(float(r[col[m]].replace(",", "")) for m in DRAM)
        out[stage]["results"] += 1
    return out


def _stats_wall(stats_csv) -> dict[str, float]:
    df = pd.read_csv(stats_csv)
    return {r.split(":", 1)[1]: float(t) for r, t in zip(df["Range"], df["Total Time (ns)"], strict=True)}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """The three captures through the real workflow, one snakemake run each."""
    out = {}
    for name in ("train", "moe", "decoder"):
        wf = copy_workflow(tmp_path_factory.mktemp(name))
        snakemake(wf, "--cores", "1", "results/report.html", "--config", f"captures={HANDMADE / name}")
        out[name] = wf / "results" / "captures" / name
    return out


def _stages(run) -> pd.DataFrame:
    return pd.read_csv(run / "stages.csv", keep_default_na=False, na_values=[""]).set_index("stage")


def test_a_training_step_with_fused_adamw_is_analysed(analysed):
    run = analysed["train"]
    st = _stages(run)
    assert list(st.index) == ["LLM@forward", "LLM@backward", "LLM@optimizer"]
    cells = _cell_sums(HANDMADE / "train" / "ncu.raw.csv")
    assert st.loc["LLM@forward", "flops_tensor_measured"] == pytest.approx(cells["LLM@forward"]["bf16"], rel=1e-9)
    assert st.loc["LLM@forward", "dram_bytes_measured"] == pytest.approx(cells["LLM@forward"]["dram"], rel=1e-9)
    assert st.loc["LLM@forward", "coverage"] == 1.0 and st.loc["LLM@optimizer", "coverage"] == 1.0
    kernels = pd.read_csv(run / "kernels.csv")
    adam = kernels[(kernels["stage"] == "LLM@optimizer") & kernels["kernel"].str.contains("FusedAdamMathFunctor")]
    assert len(adam) and adam["flops_tensor"].notna().all()  # the kernel whose name nsys and ncu spell apart
    # ncu's NVTX filter is per thread: autograd's backward kernels are not in the capture, and the page says so
    assert st.loc["LLM@backward", "coverage"] < 0.05
    # ... so its counters, which would count the rest as zero, are not shown: "—", never a zero
    for col in ("flops_tensor_measured", "dram_bytes_measured", "hfu_busy", "dram_bw_util_busy"):
        assert pd.isna(st.loc["LLM@backward", col]), col
    summary = Summary.read(run / "summary.json")
    assert any(d.source == "LLM@backward" and d.level == "warning" for d in summary.diagnostics)
    assert any("autograd" in n and "LLM@backward" in n for n in summary.notes())
    # the coverage is said once: as the diagnostic, which the note that explains it points to
    assert sum("of the stage's GPU time" in d.message for d in summary.diagnostics if d.source == "LLM@backward") == 1


def test_an_moe_with_nested_decode_ranges_and_cub_ranges_is_analysed(analysed):
    run = analysed["moe"]
    st = _stages(run)
    # LLM@decode_all only holds the steps: a container, not a stage; CCCL's own ranges are never the stages
    assert list(st.index) == ["LLM@prefill", "LLM@decode_step"]
    assert st.loc["LLM@decode_step", "range_instances"] == 3
    cells = _cell_sums(HANDMADE / "moe" / "ncu.raw.csv")
    assert set(cells) == {"LLM@prefill", "LLM@decode_step"}
    for stage in st.index:
        assert st.loc[stage, "coverage"] == 1.0
        assert st.loc[stage, "flops_tensor_measured"] == pytest.approx(cells[stage]["bf16"], rel=1e-9)
        assert st.loc[stage, "dram_bytes_measured"] == pytest.approx(cells[stage]["dram"], rel=1e-9)
        # every result is one profiled launch, counted once (not once per launch of its class)
        assert st.loc[stage, "profiled_launches"] == cells[stage]["results"]
    kernels = pd.read_csv(run / "kernels.csv")
    assert (kernels["sampled_launches"] <= kernels["instances"]).all()
    by_stage = kernels.groupby("stage")["sampled_launches"].sum()
    assert {k: by_stage[k] for k in st.index} == {k: cells[k]["results"] for k in st.index}
    # no probe ran beside these captures: which operator launched each kernel is unknown, not zero FLOPs of each
    assert st[["flops_measured_gemm", "flops_measured_attention", "flops_measured_other"]].isna().all().all()
    notes = Summary.read(run / "summary.json").notes()
    assert any(n.startswith("LLM@decode_all: a range that only holds") for n in notes)
    assert kernels["kernel"].str.contains("kernelHistogram1D").any()  # MoE routing's histogram, joined


def test_the_guides_nested_decode_loop_times_match_nsys_stats(analysed):
    run = analysed["decoder"]
    st = _stages(run)
    wall = _stats_wall(HANDMADE / "decoder" / "stats_nvtx_sum.csv")
    assert list(st.index) == ["LLM@prefill", "LLM@decode_step"]
    assert st.loc["LLM@decode_step", "range_instances"] == 4
    for stage in st.index:
        assert st.loc[stage, "wall_ms"] == pytest.approx(wall[stage] / 1e6, rel=1e-9)
    assert st["coverage"].isna().all()  # no ncu export: times only, not "0% measured"


def _stats_only(tmp_path, edit=None):
    """The decoder's nsys stats CSVs alone (no SQLite), imported as the workflow imports them."""
    import shutil

    from nsightflow.analysis.captures import aggregate_captures
    from nsightflow.capture.launch.imported import import_captures

    caps = tmp_path / "caps"
    caps.mkdir()
    for f in (HANDMADE / "decoder").glob("stats_*.csv"):
        shutil.copy(f, caps / f.name)
    if edit:
        edit(caps)
    import_captures(caps, tmp_path / "imported")
    return aggregate_captures(tmp_path / "imported", EVERY_CLASS, domain="LLM")


def test_stats_alone_resolve_nested_ranges_as_the_sqlite_does(analysed, tmp_path):
    """decode_all holds the decode steps: from the stats CSVs alone it is not a stage either, so prefill's share
    of the run is the same as from the SQLite (it read 11.8% against 21.2% when decode_all was a stage)."""
    stats = _stats_only(tmp_path).stages.set_index("stage")
    sqlite = _stages(analysed["decoder"])
    assert set(stats.index) == set(sqlite.index) == {"LLM@prefill", "LLM@decode_step"}  # (stats have no order)
    wall = _stats_wall(HANDMADE / "decoder" / "stats_nvtx_sum.csv")
    share = wall["LLM@prefill"] / (wall["LLM@prefill"] + wall["LLM@decode_step"])
    for st in (stats, sqlite):
        assert st.loc["LLM@prefill", "wall_ms"] / st["wall_ms"].sum() == pytest.approx(share, rel=1e-9)
    # busy time per stage: the stats' own kernel rows of that range, summed (each kernel listed once per range)
    rows = pd.read_csv(HANDMADE / "decoder" / "stats_nvtx_kern_sum.csv")
    for stage in stats.index:
        ns = rows.loc[rows["NVTX Range"] == f"LLM:{stage}", "Total Time (ns)"].sum()
        assert stats.loc[stage, "gpu_busy_ms"] == pytest.approx(ns / 1e6, rel=1e-9)


def test_a_copied_stats_row_is_refused(tmp_path):
    def copy_row(caps):
        path = caps / "stats_nvtx_kern_sum.csv"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join([*lines, lines[5]]))  # busy time of that range would count twice

    with pytest.raises(ValueError, match=r"stats_nvtx_kern_sum.csv: rows 6 and \d+ are the same .*a row was copied"):
        _stats_only(tmp_path, copy_row)
