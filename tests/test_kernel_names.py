"""Kernel identity between nsys and ncu, on every kernel of a corpus of real programs recorded on the H200.

tests/data/kernel_names (benchmarks/gpu_record.py names, then benchmarks/name_corpus.py): 14 programs in one
process (HuggingFace Llama training steps with fused, foreach and plain AdamW and SGD, a GPT-2 step under bf16
autocast with fused AdamW, Mixtral training and decode, Qwen2-MoE training, the decoder on each SDPA backend,
under torch.compile and replayed from CUDA graphs), traced by nsys and profiled by ncu (every launch), ncu's
export printed on each kernel-name base. The launches are joined by launch order, not by name, so the names
can be checked against the join.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from nsightflow.capture.read.matching import MatchError, kernel_agrees, match_to_plan, name_key

DATA = Path(__file__).parent / "data" / "kernel_names"


@pytest.fixture(scope="module")
def names() -> pd.DataFrame:
    return pd.read_csv(DATA / "names.csv", keep_default_na=False, index_col="name_id")


@pytest.fixture(scope="module")
def launches(names) -> pd.DataFrame:
    df = pd.read_csv(DATA / "launches.csv")
    return df.join(names, on="name_id")


def test_the_corpus_holds_the_kernels_that_were_refused(names):
    """The spellings that made real programs fail: enum casts in fused AdamW and histograms, CUB's namespaces."""
    for part in (
        "FusedAdamMathFunctor",
        "kernelHistogram1D",
        "at_cuda_detail::cub::detail::radix_sort::DeviceRadixSort",
        "triton_",
    ):
        rows = names[names["nsys_demangled"].str.contains(part, regex=False)]
        assert len(rows), part
    differ = names[names["nsys_demangled"] != names["ncu_demangled"]]
    assert len(differ) > 100  # most templated kernels are spelled differently by the two tools
    assert len(names) >= 200 and names["program"].nunique() >= 12


def test_ncu_prints_the_mangled_name_nsys_records(names):
    assert (names["ncu_mangled"] == names["nsys_mangled"]).all()


@pytest.mark.parametrize("export", ["ncu_mangled", "ncu_demangled"])
def test_every_kernel_agrees_with_itself_and_with_no_other(names, export):
    for i, row in names.iterrows():
        assert kernel_agrees(row[export], row["nsys_mangled"], row["nsys_demangled"]), (i, row[export][:120])
    # no false join: another kernel's names never agree (demangled keys are unique over the corpus)
    assert names["nsys_demangled"].map(name_key).is_unique
    other = names.iloc[list(range(1, len(names))) + [0]]
    for mine, (_, theirs) in zip(names[export], other.iterrows(), strict=True):
        assert not kernel_agrees(mine, theirs["nsys_mangled"], theirs["nsys_demangled"])


def _plan_and_results(launches: pd.DataFrame, export: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    same_shape = launches[
        (launches["nsys_grid"] == launches["ncu_grid"]) & (launches["nsys_block"] == launches["ncu_block"])
    ]
    same_shape = same_shape.reset_index(drop=True)
    expected = pd.DataFrame(
        {
            "stage": same_shape["program"],
            "step": 0,
            "class_key": same_shape.index.astype(str),
            "kernel": same_shape["nsys_demangled"],
            "mangled": same_shape["nsys_mangled"],
            "grid": same_shape["nsys_grid"],
            "block": same_shape["nsys_block"],
        }
    )
    results = pd.DataFrame(
        {
            "ncu_id": range(len(same_shape)),
            "ncu_kernel": same_shape[export],
            "grid": same_shape["ncu_grid"],
            "block": same_shape["ncu_block"],
        }
    )
    return expected, results


@pytest.mark.parametrize("export", ["ncu_mangled", "ncu_demangled"])
def test_a_whole_capture_joins_to_its_plan(launches, export):
    expected, results = _plan_and_results(launches, export)
    assert len(expected) > 4800
    joined = match_to_plan(results, expected, "corpus")
    assert (joined["class_key"] == expected["class_key"]).all()
    assert (joined["kernel"] == expected["kernel"]).all()  # the timeline's demangled name is kept for display


def test_a_result_out_of_place_is_refused(launches):
    expected, results = _plan_and_results(launches, "ncu_mangled")
    # the plan's 100th and 101st launches swapped: kernels differ there, so the join must fail, naming result 100
    swapped = results.copy()
    i = next(i for i in range(100, len(results)) if results.loc[i, "ncu_kernel"] != results.loc[i + 1, "ncu_kernel"])
    swapped.loc[[i, i + 1], "ncu_kernel"] = swapped.loc[[i + 1, i], "ncu_kernel"].to_numpy()
    with pytest.raises(MatchError, match=f"result {i} "):
        match_to_plan(swapped, expected, "corpus")
