"""The column registry (nsightflow.columns) is the truth of what a run's tables hold: every column a backend
produces is registered, for that backend, and every registered column is produced by some backend. Tables made
by the real code paths: an H200 run (with range results), a hand-made capture, a torch.profiler run on the CPU."""

import shutil

import pandas as pd
import pytest
from conftest import DATA, DEFAULT_FOCUS, aggregate_recorded, torch_harness_run

from nsightflow import columns
from nsightflow.analysis import captures
from nsightflow.analysis.runfiles import in_order
from nsightflow.capture.launch import imported

TINY = {"batch": 1, "prompt": 16, "decode_steps": 2, "vocab": 256, "d_model": 32, "n_layers": 1, "n_heads": 2}


def _nsight():
    d = DATA / "h200_v2" / "ranges"
    return aggregate_recorded(
        d,
        ranges_export=d / "ranges.raw.csv",
        ranges_plan=d / "ranges.plan.json",
    )


def _captures(tmp_path):
    caps = tmp_path / "caps"
    shutil.copytree(DATA / "handmade" / "train", caps)
    imported.import_captures(caps, tmp_path / "imported")
    return captures.aggregate_captures(tmp_path / "imported", DEFAULT_FOCUS)


# An MoE's grouped GEMM on the CPU: its expert columns (a decoder has none).
EXPERTS = {"tokens": 256, "hidden": 64, "ffn": 96, "experts": 4, "device": "cpu", "dtype": "float32", "steps": 2}


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """backend -> table -> the columns it filled (a value somewhere, not only empty cells)."""
    runs = {
        columns.NSIGHT: _nsight(),
        columns.CAPTURES: _captures(tmp_path_factory.mktemp("captures")),
        columns.TORCH: torch_harness_run(tmp_path_factory.mktemp("torch"), "nsightflow.workloads.decoder:build", TINY),
        "torch (experts)": torch_harness_run(tmp_path_factory.mktemp("experts"), "workloads:grouped_experts", EXPERTS),
    }
    out = {}
    for backend, agg in runs.items():
        backend = backend.split(" ")[0]
        for table, df in (("stages", agg.stages), ("kernels", agg.kernels)):
            in_order(table, df)  # raises on a column the registry lacks
            out.setdefault(backend, {}).setdefault(table, set()).update(c for c in df.columns if df[c].notna().any())
    return out


@pytest.mark.parametrize("table", ["stages", "kernels"])
def test_every_column_produced_is_registered_for_its_backend_and_every_registered_one_is_produced(produced, table):
    registry = {c.name: c for c in columns.TABLES[table]}
    for backend, tables in produced.items():
        unknown = tables[table] - set(registry)
        assert not unknown, f"{backend} {table}: not registered: {sorted(unknown)}"
        wrong = sorted(c for c in tables[table] if backend not in registry[c].backends)
        assert not wrong, f"{backend} fills {wrong}, which the registry says it does not"
    # Measured by the CUDA allocator only: the GPU tier checks them (test_gpu.py, the default decoder's memory).
    on_a_gpu = {"memory_allocated_peak", "memory_reserved_peak"}
    # A command's only (its steps' starts): test_command.py's script through the workflow checks it.
    commands = {"pace_ms"}
    never = sorted(set(registry) - on_a_gpu - commands - set().union(*(t[table] for t in produced.values())))
    assert not never, f"registered, produced by no backend: {never}"


def test_an_unregistered_column_is_refused_before_it_is_written():
    with pytest.raises(AssertionError, match=r"stages.csv: column\(s\) \['surprise'\] are not in nsightflow.columns"):
        in_order("stages", pd.DataFrame({"stage": ["a"], "surprise": [1.0]}))


def test_every_shown_column_has_a_known_format_and_the_glossary_its_definitions():
    from nsightflow.report import glossary, tables

    for table in columns.TABLES.values():
        for c in table:
            assert c.fmt in tables.FORMATS, c
            assert not c.term or c.definition, c
    terms = [t for t, _ in glossary.GLOSSARY]
    assert terms[:2] == ["wall", "wall under profiler"] and "peaks" in terms
