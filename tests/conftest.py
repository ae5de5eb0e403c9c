"""Shared test helpers: fixture paths, a temporary copy of the workflow, GPU-tier skipping."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nsightflow.analysis.focus import Focus
from nsightflow.capture.read.matching import name_key

ROOT = Path(__file__).resolve().parents[1]
# config select.top_n, select.coverage and report.divergence as the workflow's schema sets them by default
DEFAULT_FOCUS = Focus(top_n=10, coverage=0.9, divergence=0.5)
# the divergence alone: every kernel class named
EVERY_CLASS = Focus(top_n=None, coverage=None, divergence=0.5)
DATA = ROOT / "tests" / "data"


def steady_steps(run: Path, stage: str, steps: int) -> int:
    """The steps of a command's ``stage`` left once the run set its warm-up steps apart
    (nsightflow.capture.read.warmup),
    checked against its manifest: the timed run had all ``steps``, only leading ones were set apart, at least one
    is left."""
    import json

    manifest = json.loads((run / "manifest.json").read_text())
    apart = [int(w["step"]) for w in manifest.get("warmup_steps", []) if w["stage"] == stage]
    assert len(manifest["every_wall_s"][stage]) == steps
    assert apart == list(range(len(apart))) and len(apart) < steps
    assert len(manifest["program_wall_s"][stage]) == steps - len(apart)
    return steps - len(apart)


def gpu_available() -> bool:
    """A CUDA GPU visible to torch and both Nsight tools on PATH: the GPU test host."""
    if not (shutil.which("nsys") and shutil.which("ncu")):
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def slurm_available() -> bool:
    """A Slurm controller that answers, with a node ready for jobs (scripts/slurm_local.sh starts one)."""
    if not shutil.which("sinfo"):
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(s in ("idle", "mixed", "allocated") for s in out.stdout.split())


def corpus_dir() -> Path | None:
    """The folder of public programs the corpus tier runs (NSIGHTFLOW_CORPUS: one snapshot per program, e.g.
    ``nanoGPT/train.py``): their code is never committed here, so each machine brings its own copy."""
    folder = os.environ.get("NSIGHTFLOW_CORPUS")
    return Path(folder).resolve() if folder and Path(folder).is_dir() else None


# Tiers that are skipped where their machinery is missing, unless NSIGHTFLOW_REQUIRE names them (CI does,
# so that a broken setup fails the run instead of skipping its tests).
TIERS = {
    "gpu": (gpu_available, "a CUDA GPU with nsys and ncu on PATH (the GPU test host)"),
    "slurm": (slurm_available, "a Slurm cluster that answers (sinfo); scripts/slurm_local.sh starts one"),
    "browser": (lambda: shutil.which("chromium") is not None, "Chromium (Debian's package chromium)"),
    "corpus": (lambda: corpus_dir() is not None, "NSIGHTFLOW_CORPUS: a folder of the public programs' snapshots"),
    "engines": (lambda: importlib.util.find_spec("vllm") is not None, "vLLM importable (README: Run the tests)"),
}


def pytest_collection_modifyitems(config, items):
    required = {t.strip() for t in os.environ.get("NSIGHTFLOW_REQUIRE", "").split(",") if t.strip()}
    for tier, (available, what) in TIERS.items():
        if not any(tier in item.keywords for item in items) or available():
            continue
        if tier in required:
            raise pytest.UsageError(f"NSIGHTFLOW_REQUIRE names '{tier}' but this machine lacks {what}")
        skip = pytest.mark.skip(reason=f"needs {what}")
        for item in items:
            if tier in item.keywords:
                item.add_marker(skip)


WORKFLOW = (
    "Snakefile",
    "config",
    "workflow",
    "envs",
    "profiles",
    "tests",
    "examples",
)  # what a run of the workflow reads


def copy_workflow(dest: Path) -> Path:
    """Copy the workflow (its own folders, not the checkout: a virtual environment or results inside the
    checkout stay behind; no git needed) into ``dest``; tests/ for the test workloads, without tests/data."""
    dest.mkdir(parents=True, exist_ok=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for top in WORKFLOW:
        src = ROOT / top
        if src.is_file():
            shutil.copy2(src, dest / top)
        elif src.is_dir():
            shutil.copytree(
                src,
                dest / top,
                ignore=lambda d, names: skip(d, names) | ({"data"} if Path(d) == ROOT / "tests" else set()),
                dirs_exist_ok=True,
            )
    return dest


def snakemake(workdir: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real Snakemake in ``workdir`` as a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}")
    return proc


def process_alive(pid: int) -> bool:
    """Whether a process still runs (a zombie has ended: only its reaping is left)."""
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return False


def foreground_workflow(workdir: Path, env: dict | None = None) -> subprocess.Popen:
    """``snakemake --cores 1 results/report.html`` started as a shell's foreground job is: in a process group of its
    own and with the default disposition of Ctrl-C, hang-up and SIGTERM (a test run started in the background by a
    non-interactive shell ignores SIGINT, one under nohup or a CI runner may ignore SIGHUP, and children inherit an
    ignored signal; a terminal's foreground job ignores none). Its temporary folder is ``workdir/tmp``."""
    import signal

    def as_in_a_terminal() -> None:
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)

    tmp = workdir / "tmp"  # the machine's temporary folder, as this workflow sees it: left_in_tmp reads it
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1", "results/report.html"],
        cwd=workdir,
        env={**(os.environ if env is None else env), "TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=as_in_a_terminal,
    )


def left_in_tmp(workdir: Path) -> list[str]:
    """What a workflow started by ``foreground_workflow`` left in its temporary folder, Snakemake's own folder
    (``snakemake*``, which a killed Snakemake cannot remove) aside: nothing of nsightflow's may be there."""
    return sorted(p.name for p in (workdir / "tmp").iterdir() if not p.name.startswith("snakemake"))


def slow_ranks_script(path: Path, marks: Path, mode: str | None = None, device: str = "cpu") -> Path:
    """A rank program for interrupt tests: a step in NVTX range ``work`` (domain ``job``) that writes its pid to
    ``marks/<RANK>`` and sleeps 120 s; with ``mode``, only in the launch the hook runs in that mode (else the step
    does a little work on ``device`` and ends)."""
    path.write_text(
        "import json, os, time, nvtx, torch\n"
        "mode = json.loads(os.environ.get('NSIGHTFLOW_HOOK') or '{}').get('mode')\n"
        "with nvtx.annotate('work', domain='job'):\n"
        f"    (torch.ones(1024, device={device!r}) * 2).sum().item()\n"
        f"    if {mode!r} in (None, mode):\n"
        f"        open(os.path.join({str(marks)!r}, os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "        time.sleep(120)\n"
    )
    return path


def wait_gone(pids: list[int], seconds: float = 30) -> bool:
    """Whether every process of ``pids`` has ended within ``seconds``."""
    import time

    deadline = time.time() + seconds
    while any(process_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    return not any(process_alive(p) for p in pids)


SUITE_ENV = "NSIGHTFLOW_TEST_SUITE"  # set for the test run: every process it starts inherits it, orphans too
SUITE_TMP = pytest.StashKey[str]()


def pytest_configure(config):
    """The test run gets a temporary folder of its own (``TMPDIR``, inherited by every process it starts, Slurm's
    jobs included) and a mark in the environment, so that what a test leaves behind is found at the end: a folder
    there, or a process carrying the mark."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="nsightflow-tests-")
    config.stash[SUITE_TMP] = folder
    os.environ["TMPDIR"] = folder
    os.environ[SUITE_ENV] = folder
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def marked(mark: str) -> list[int]:
    """The processes whose environment carries the test run's mark (any parent: an orphan's is 1), this one
    excepted."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # ended, or another user's
        if f"{SUITE_ENV}={mark}".encode() in environ:
            found.append(int(proc.name))
    return found


def pytest_sessionfinish(session, exitstatus):
    """No test leaves a process or a temporary file behind: every process below the test run, or carrying its
    mark, at its end fails the run, named (and is killed, so the machine is left clean); so does every entry left
    in the run's temporary folder but pytest's own ``tmp_path`` folders."""
    import signal
    import time

    from nsightflow.capture.launch.children import command, descendants

    folder = session.config.stash.get(SUITE_TMP, "")

    def left_behind() -> list[int]:
        # multiprocessing's resource tracker serves the test process itself (torch starts it) and ends with it.
        pids = set(descendants()) | set(marked(folder) if folder else [])
        return sorted(p for p in pids if "multiprocessing.resource_tracker" not in command(p))

    deadline = time.time() + 10  # a process being reaped right now
    while left_behind() and time.time() < deadline:
        time.sleep(0.5)
    left = left_behind()
    if left:
        names = [f"{pid} {command(pid)[:150]}" for pid in left]
        print("\nprocesses left behind by the tests:\n  " + "\n  ".join(names), file=sys.stderr)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        session.exitstatus = 1
    if folder and Path(folder).is_dir():
        # pytest's own tmp_path folders; torch's compile cache and Nsight Systems' own folder (nvidia/nsight_systems),
        # which the tools keep there after any plain run
        kept = ("pytest-of-", "torchinductor_", "nvidia")
        files = sorted(p.name for p in Path(folder).iterdir() if not p.name.startswith(kept))
        if files:
            print("\ntemporary files left behind by the tests (in TMPDIR):\n  " + "\n  ".join(files), file=sys.stderr)
            session.exitstatus = 1
        if session.exitstatus == 0:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"\nthe test run's temporary folder is kept: {folder}", file=sys.stderr)


def aggregate_recorded(d: Path, precision: str = "bf16", manifest_json=None, capture_record=None, **files):
    """A recorded run folder (timeline.sqlite, plan.json, capture.raw.csv, analytic_flops.json, ceilings.json)
    aggregated as the workflow does with the default config (divergence 0.5, top 10, coverage 0.9); ``files``: other
    fields of its record (a range capture: ranges_export, ranges_plan)."""
    from nsightflow.analysis import nsight

    paths = (d / "timeline.sqlite", d / "plan.json", d / "capture.raw.csv", d / "analytic_flops.json")
    run = nsight.NsightInputs(*paths, ceilings=d / "ceilings.json", manifest=manifest_json, **files)
    return nsight.aggregate_run(run, "nsightflow", precision, DEFAULT_FOCUS, capture_record=capture_record)


def sql_launches(sqlite, domain="nsightflow"):
    """Every kernel whose launch call lies in a harness range of ``domain`` (any thread), by plain SQL:
    a second, independent attribution by time window. A timeline with no range of ``domain`` traced the probe pass
    alone: its step ranges (``domain.probe``) are then the stages'."""
    con = sqlite3.connect(sqlite)
    has = "SELECT COUNT(*) FROM NVTX_EVENTS n JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = n.domainId "
    if not con.execute(has + "AND d.text = ? WHERE n.eventType = 59", (domain,)).fetchone()[0]:
        domain = f"{domain}.probe"
    q = """
    WITH d AS (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?),
    r AS (SELECT n.start, n."end", n.globalTid AS rtid, COALESCE(n.text, s.value) AS stage,
                 COALESCE(n.int64Value, n.uint64Value, n.int32Value, n.uint32Value) AS step
          FROM NVTX_EVENTS n JOIN d ON d.domainId = n.domainId LEFT JOIN StringIds s ON s.id = n.textId
          WHERE n.eventType = 59)
    SELECT r.stage, r.step, dn.value AS kernel, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
           k.dynamicSharedMemory AS smem, rt.globalTid = r.rtid AS same_thread, k.graphNodeId IS NOT NULL AS graph,
           k."end" - k.start AS duration_ns
    FROM CUPTI_ACTIVITY_KIND_KERNEL k
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId
    JOIN StringIds dn ON dn.id = k.demangledName
    JOIN r ON rt.start BETWEEN r.start AND r."end"
    ORDER BY rt.start
    """
    df = pd.read_sql_query(q, con, params=(domain,))
    df["grid"] = [f"({x}, {y}, {z})" for x, y, z in zip(df.gridX, df.gridY, df.gridZ, strict=True)]
    df["block"] = [f"({x}, {y}, {z})" for x, y, z in zip(df.blockX, df.blockY, df.blockZ, strict=True)]
    df["key"] = [(name_key(k), g, b, int(s)) for k, g, b, s in zip(df.kernel, df.grid, df.block, df.smem, strict=True)]
    return df


def plain_nsys(argv: list[str], out: Path, cwd: Path) -> Path:
    """``argv`` under a plain ``nsys profile`` (no hook, nothing of nsightflow in the process): its SQLite export;
    the program's output in ``<out>.log``."""
    nsys = [shutil.which("nsys") or "nsys", "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none"]
    nsys += ["--cuda-graph-trace=node", "--export=sqlite", "-o", str(out)]
    with open(f"{out}.log", "w") as log:
        subprocess.run(nsys + argv, check=True, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    return Path(f"{out}.sqlite")


TUNED_SITE = """# Written by nsightflow's tests: a reference run that takes a timed run's autotuning choices
import json, os, sys
try:
    _python = "python" in os.path.basename(os.readlink("/proc/self/exe")).lower()
except OSError:
    _python = True
if _python:  # not ncu's embedded interpreter
    sys.path.append({src!r})
    from nsightflow.capture.inside import hook_tuning
    hook_tuning.install(json.load(open({record!r})))
"""


def tuned_env(folder: Path, choices: dict[str, list[str]]) -> dict[str, str]:
    """An environment whose Python processes take ``choices`` (a run's manifest ``autotuning``) instead of timing
    inductor's candidates, and nothing else of nsightflow: a reference under ncu then launches the kernels the
    program chose when it ran plainly (ncu slows every candidate, so its own timing picks others)."""
    import nsightflow

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "choices.json").write_text(json.dumps(choices))
    src = str(Path(nsightflow.__file__).resolve().parent.parent)
    (folder / "sitecustomize.py").write_text(TUNED_SITE.format(src=src, record=str(folder / "choices.json")))
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def kernels_per_range(sqlite: Path, domain: str, name: str) -> list[pd.DataFrame]:
    """Each range ``name`` of ``domain`` in order: the kernels launched inside it (kernel, graph: replayed from a
    CUDA graph, start and end on the GPU), by plain SQL over the export."""
    con = sqlite3.connect(sqlite)
    ranges = con.execute(
        'SELECT n.start, n."end" FROM NVTX_EVENTS n JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.text = ? '
        "AND d.domainId = n.domainId LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 "
        "AND COALESCE(n.text, s.value) = ? ORDER BY n.start",
        (domain, name),
    ).fetchall()
    launches = pd.read_sql_query(
        'SELECT rt.start AS launch, dn.value AS kernel, k.graphNodeId IS NOT NULL AS graph, k.start, k."end" FROM '
        "CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId "
        "JOIN StringIds dn ON dn.id = k.demangledName",
        con,
    )
    con.close()
    return [launches[(launches["launch"] >= s) & (launches["launch"] <= e)] for s, e in ranges]


def sql_rank_kernels(sqlite, domain):
    """Every kernel whose launch call lies in one of its own process's ranges of ``domain`` (domain ids are
    numbered per process): pid, range name, kernel, start, end, and the range's start. Plain SQL over an nsys
    export, independent of nsightflow's attribution."""

    con = sqlite3.connect(sqlite)
    q = """
    WITH d AS (SELECT (globalTid >> 24) & 16777215 AS pid, domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?),
    r AS (SELECT (n.globalTid >> 24) & 16777215 AS pid, COALESCE(n.text, s.value) AS name, n.start, n."end"
          FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId JOIN d
          ON d.pid = (n.globalTid >> 24) & 16777215 AND d.domainId = n.domainId WHERE n.eventType = 59),
    k AS (SELECT (k.globalPid >> 24) & 16777215 AS pid, rt.start AS launch, kn.value AS kernel, k.start, k."end"
          FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds kn ON kn.id = k.demangledName
          JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = k.correlationId
           AND ((rt.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215))
    SELECT r.pid, r.name, k.kernel, k.start, k."end", r.start
      FROM r JOIN k ON k.pid = r.pid AND k.launch BETWEEN r.start AND r."end"
    """
    rows = con.execute(q, (domain,)).fetchall()
    con.close()
    return pd.DataFrame(rows, columns=["pid", "stage", "kernel", "start", "end", "range_start"])


def torch_workflow(tmp_path: Path, workloads: list[dict]) -> Path:
    """A fresh copy of the workflow with these workloads, on the torch.profiler backend."""
    import yaml

    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    cfg.update(workloads=workloads, profiler="torch")
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return work


def steady_rows(sql: pd.DataFrame, warmup_steps: list[dict]) -> pd.DataFrame:
    """sql_rank_kernels' rows less those of warm-up steps (``[{"stage", "step"}]``, a step by its ordinal among its
    process's ranges of that stage; a range without kernels is not counted here: a test that needs it fails)."""
    ordinal = sql.groupby(["pid", "stage"])["range_start"].rank(method="dense").astype(int) - 1
    warm = pd.Series(False, index=sql.index)
    for w in warmup_steps:
        warm |= (sql["stage"] == w["stage"]) & (ordinal == int(w["step"]))
    return sql[~warm]


def exposed_by_hand(g: pd.DataFrame) -> int:
    """Communication time (ns) with no compute kernel running, by walking each NCCL kernel's span over the other
    kernels (``g``: kernel, start, end; sql_rank_kernels' rows of one rank's stage)."""
    compute = sorted((s, e) for k, s, e in zip(g["kernel"], g["start"], g["end"], strict=True) if "nccl" not in k)
    exposed = 0
    for k, s, e in zip(g["kernel"], g["start"], g["end"], strict=True):
        if "nccl" not in k:
            continue
        t = s
        for cs, ce in compute:
            if ce <= t or cs >= e:
                continue
            exposed += max(0, cs - t)
            t = max(t, ce)
        exposed += max(0, e - t)
    return exposed


def moe_gemm_flops(c: dict, batch: int, tokens: int) -> int:
    """GEMM FLOPs of one forward of a Mixtral-style model (HuggingFace config ``c``) over ``tokens`` new tokens of
    each of ``batch`` rows, logits of the last position only, without the rotary angles: q, k, v, o, the router,
    and each token's top-k experts (gate, up, down). Every token goes to k experts, so this holds whatever the
    routing."""
    h, i, hq, hkv = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
    k, e, hd = c["num_experts_per_tok"], c["num_local_experts"], h // hq
    per_token = h * h + 2 * h * hkv * hd + h * h + h * e + k * 3 * h * i  # MACs
    return 2 * batch * tokens * per_token * c["num_hidden_layers"] + 2 * batch * h * c["vocab_size"]


def torch_harness_run(tmp_path, spec, args):
    """The harness run under torch.profiler (a CPU here) on ``spec`` with ``args``, aggregated as the workflow does
    (top 10, coverage 0.9, divergence 0.5); tests/ on PYTHONPATH for its workloads."""
    from nsightflow.analysis import torch_backend, torchprof

    out = {k: tmp_path / f"{k}.json" for k in ("trace", "flops", "ceilings", "run")}
    argv = [sys.executable, "-m", "nsightflow.capture.inside.harness", "--mode", "torch", "--args", json.dumps(args)]
    argv += ["--callable", spec]
    argv += ["--trace", str(out["trace"]), "--flops-out", str(out["flops"]), "--ceilings-out", str(out["ceilings"])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([*argv, "--out", str(out["run"])], check=True, capture_output=True, env=env)
    trace = torchprof.load_trace(out["trace"])
    labels = json.loads(out["run"].read_text())["trace_labels"]
    return torch_backend.aggregate_torch(
        torchprof.kernel_table(trace, labels),
        torchprof.stage_table(trace, labels),
        out["flops"],
        out["ceilings"],
        "fp32",
        DEFAULT_FOCUS,
        torchprof.device_kind(trace),
        manifest_json=out["run"],
        expert_ns=torchprof.expert_time(trace, labels),
    )
