"""The package's layers, as docs/architecture.md draws them: core modules, then workloads, capture, analysis, report
and rules, each importing only from the layers below it (function-level imports too), and no import cycle."""

import ast
from pathlib import Path

import pytest
from conftest import ROOT

SRC = ROOT / "src"
LAYERS = ["core", "workloads", "capture", "analysis", "report", "rules"]


def _modules() -> dict[str, Path]:
    out = {}
    for f in (SRC / "nsightflow").rglob("*.py"):
        name = ".".join(f.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nsightflow"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("nsightflow")}
        edges[name] = {d for d in deps if d in modules and d != name}
    return edges


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def test_no_module_imports_a_layer_above_its_own():
    edges = _imports(_modules())
    upward = sorted(
        f"{m} -> {d}" for m, ds in edges.items() for d in ds if LAYERS.index(_layer(d)) > LAYERS.index(_layer(m))
    )
    assert not upward, upward


def _role(module: str) -> str | None:
    """A capture module's role (nsightflow.capture.inside, .launch or .read), None for any other module."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "capture" else None


def test_analysis_and_report_import_only_readers_and_vocabulary_from_capture():
    """What analysis and the report import of capture reads exports: nothing that launches a process or runs inside
    the profiled program (the vocabulary they share with those, precisions, metric names, formulas and domains, lies
    below capture)."""
    edges = _imports(_modules())
    wrong = sorted(
        f"{m} -> {d}"
        for m, ds in edges.items()
        if _layer(m) in ("analysis", "report")
        for d in ds
        if _layer(d) == "capture" and _role(d) != "read"
    )
    assert not wrong, wrong


def test_readers_launch_nothing_and_run_nothing_inside_the_program():
    edges = _imports(_modules())
    wrong = sorted(
        f"{m} -> {d}" for m, ds in edges.items() if _role(m) == "read" for d in ds if _role(d) in ("inside", "launch")
    )
    assert not wrong, wrong


def test_every_capture_module_has_a_role():
    roles = {"inside", "launch", "read"}
    loose = sorted(
        m for m in _modules() if _layer(m) == "capture" and m.count(".") == 2 and m.split(".")[2] not in roles
    )
    assert not loose, loose


def test_no_import_cycle():
    edges = _imports(_modules())
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycles.append(path[path.index(d) :] + [d] if d in path else [m, d])
            elif not state.get(d):
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m, [m])
    assert not cycles, cycles


def test_every_module_is_short():
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


@pytest.mark.parametrize("script", ["timeline", "ncu_capture", "capture"])
def test_the_profiling_jobs_start_their_profiler_without_importing_pandas_or_torch(script):
    """What the timeline's and the ncu capture's rule scripts import before their profiler starts (a callable's job
    needs neither pandas nor torch in its own process before then): pandas cost the timeline job about 0.9 s on the GPU
    host before nsys could start; the ncu capture's plan, which needs pandas, is made once ncu has started."""
    import subprocess
    import sys

    text = (ROOT / "workflow" / "scripts" / f"{script}.py").read_text()
    imports = "\n".join(ln for ln in text.splitlines() if ln.startswith(("from ", "import ")))
    probe = imports + "\nimport sys\nprint(sorted(m for m in ('pandas', 'numpy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_architecture_map_names_every_module():
    """docs/architecture.md is the newcomer's map: every module of the library is in it, by its path."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    files = [f.relative_to(SRC / "nsightflow").as_posix() for f in (SRC / "nsightflow").rglob("*.py")]
    missing = [f for f in files if not f.endswith("__init__.py") and f not in text and f"`{f[:-3]}`" not in text]
    assert missing == [], f"docs/architecture.md does not name {missing}"
