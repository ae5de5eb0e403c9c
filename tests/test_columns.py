"""The column registry (nsightflow.columns) is the truth of what a run's tables hold: every column a backend
produces is registered, for that backend, and every registered column is produced by some backend. Tables made
by the real code paths: an H200 run (with range results), a hand-made capture, a torch.profiler run on the CPU."""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from conftest import DATA, aggregate_recorded

from nsightflow import columns
from nsightflow.analysis import captures, imported, torch_backend, torchprof
from nsightflow.analysis.runfiles import in_order

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
    return captures.aggregate_captures(tmp_path / "imported", 0.5, 10, 0.9)


def _torch(tmp_path):
    out = {k: tmp_path / f"{k}.json" for k in ("trace", "flops", "ceilings", "run")}
    argv = [sys.executable, "-m", "nsightflow.capture.harness", "--mode", "torch", "--args", json.dumps(TINY)]
    argv += ["--trace", str(out["trace"]), "--flops-out", str(out["flops"]), "--ceilings-out", str(out["ceilings"])]
    subprocess.run([*argv, "--out", str(out["run"])], check=True, capture_output=True)
    trace = torchprof.load_trace(out["trace"])
    labels = json.loads(out["run"].read_text())["trace_labels"]
    return torch_backend.aggregate_torch(
        torchprof.kernel_table(trace, labels),
        torchprof.stage_table(trace, labels),
        out["flops"],
        out["ceilings"],
        "fp32",
        10,
        0.9,
        torchprof.device_kind(trace),
        0.5,
        manifest_json=out["run"],
    )


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """backend -> table -> the columns it filled (a value somewhere, not only empty cells)."""
    runs = {
        columns.NSIGHT: _nsight(),
        columns.CAPTURES: _captures(tmp_path_factory.mktemp("captures")),
        columns.TORCH: _torch(tmp_path_factory.mktemp("torch")),
    }
    out = {}
    for backend, agg in runs.items():
        for table, df in (("stages", agg.stages), ("kernels", agg.kernels)):
            in_order(table, df)  # raises on a column the registry lacks
            out.setdefault(backend, {})[table] = {c for c in df.columns if df[c].notna().any()}
    return out


@pytest.mark.parametrize("table", ["stages", "kernels"])
def test_every_column_produced_is_registered_for_its_backend_and_every_registered_one_is_produced(produced, table):
    registry = {c.name: c for c in columns.TABLES[table]}
    for backend, tables in produced.items():
        unknown = tables[table] - set(registry)
        assert not unknown, f"{backend} {table}: not registered: {sorted(unknown)}"
        wrong = sorted(c for c in tables[table] if backend not in registry[c].backends)
        assert not wrong, f"{backend} fills {wrong}, which the registry says it does not"
    never = sorted(set(registry) - set().union(*(t[table] for t in produced.values())))
    assert not never, f"registered, produced by no backend: {never}"


def test_an_unregistered_column_is_refused_before_it_is_written():
    with pytest.raises(AssertionError, match=r"stages.csv: column\(s\) \['surprise'\] are not in nsightflow.columns"):
        in_order("stages", pd.DataFrame({"stage": ["a"], "surprise": [1.0]}))


def test_every_shown_column_has_a_known_format_and_the_glossary_its_definitions():
    from nsightflow.report import glossary, pages

    for table in columns.TABLES.values():
        for c in table:
            assert c.fmt in pages.FORMATS, c
            assert not c.term or c.definition, c
    terms = [t for t, _ in glossary.GLOSSARY]
    assert terms[:2] == ["wall", "wall under profiler"] and "peaks" in terms
