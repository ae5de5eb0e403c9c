"""Which stage step (and probe unit) each kernel of an nsys SQLite export belongs to, by time window.

A kernel belongs to the stage step whose range, on the harness's thread, contains the call that
launched it, whichever thread made that call: autograd launches backward kernels from its own
device thread, inside the backward range's window. Kernels inside a CUDA graph (traced with
``--cuda-graph-trace=node``) carry the correlation id of the graph launch that ran them. The harness
synchronizes before every range ends, so the window holds all the work launched in it; a kernel
whose launch call is not in the export is placed by its own start time.

nsys' own projection (``nvtx_kern_sum``) attributes per thread and shows graphs as a whole, so
the per-stage tables come from here. Everything is read column-wise and joined with numpy
(sorted searches, no SQL range join), so a million launches take seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nsightflow.capture.read import nsys_sqlite
from nsightflow.capture.read.nsys_sqlite import PUSH_POP, START_END, own_process
from nsightflow.domains import LIBRARY_DOMAINS, is_nsightflows_own, ops_domain, probe_domain

LAUNCH_COLUMNS = [
    "pass_",
    "stage",
    "step",
    "range_index",
    "unit",
    "op",
    "seq",
    "kernel_key",
    "class_key",
    "structure",
    "twin",
    "kernel",
    "mangled",
    "grid",
    "block",
    "smem",
    "start",
    "end",
    "duration_ns",
    "launch_ns",
    "tid",
    "graph",
    "stream",
]


@dataclass
class Timeline:
    """A timeline attributed to stage steps: one row per kernel launched inside a harness range.

    ``launches``: pass_ ('ranged' or 'probe'), stage, step, range_index, unit (probe pass: the
    operator or gap that launched it, see nsightflow.capture.inside.probe; -1 otherwise), op (the operator call's
    signature, 'gap' between operators; a ranged-pass launch takes its twin's, '' without one), seq
    (launch order in its step), kernel_key (kernel, grid, block, dynamic shared memory), class_key
    (what makes launches identical: the call's signature, the launch's ordinal in its unit, and the
    kernel key; a ranged-pass launch takes the class of its twin in the probe pass, or its kernel key
    where the step has no twin), structure (an id of the step's sequence of kernels: steps with equal
    ids launch the same kernels in the same order, grids and sizes aside; launches at the same
    position correspond), twin (the step's probe pass launched the same sequence), kernel
    (demangled), mangled, grid, block, smem, start, end, duration_ns, launch_ns, tid (launching
    thread), graph (ran inside a CUDA graph), stream.
    ``ranges``: the harness's stage ranges (stage, step, range_index, start, end, tid).
    ``probe_ops``: operator ranges of the probe pass.
    ``range_counts``: instances of every range of the stages' domain, by name (any thread, push/pop and
    start/end alike), as nsys stats counts them. ``containers``: range names that only hold other ranges of
    the domain (a hand-made ``decode_all`` around ``decode_step``s): not stages, their time is their children's.
    ``probe_calls``: operator calls per stage in the probe pass (its operator ranges, any thread).
    ``probe_stands_in``: the probe pass alone was traced (nsightflow.capture.inside.passes.probe_stands_in); its
    launches are the ranged pass's too, each its own twin, and its step ranges the stages'.
    """

    launches: pd.DataFrame
    ranges: pd.DataFrame
    probe_ops: pd.DataFrame
    gpu_name: str | None
    source: str
    domain: str
    range_counts: dict[str, int] = field(default_factory=dict)
    containers: list[str] = field(default_factory=list)
    probe_calls: dict[str, int] = field(default_factory=dict)
    probe_stands_in: bool = False


def top_level(ranges: pd.DataFrame) -> pd.DataFrame:
    """Ranges not nested in an earlier one of the same set (a workload's own ranges in the harness's domain)."""
    if ranges.empty:
        return ranges
    ends = ranges["end"].to_numpy()
    keep = np.ones(len(ranges), dtype=bool)
    keep[1:] = ranges["start"].to_numpy()[1:] > np.maximum.accumulate(ends)[:-1]
    return ranges[keep]


def _harness_ranges(nvtx: pd.DataFrame, domain: str) -> pd.DataFrame:
    """The harness's own step ranges in ``domain``: push/pop, top level, on the thread that opened most."""
    mine = nvtx[(nvtx["domain"] == domain) & (nvtx["eventType"] == PUSH_POP)]
    if mine.empty:
        return mine.assign(stage=[], step=[], range_index=[])
    tid = mine["globalTid"].mode().iloc[0]
    mine = top_level(mine[mine["globalTid"] == tid]).copy()
    mine["stage"] = mine["name"].astype(str)
    mine["range_index"] = mine.groupby("stage").cumcount()
    mine["step"] = mine["payload"].where(mine["payload"].notna(), mine["range_index"]).astype("int64")
    return mine.reset_index(drop=True)


def window_of(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the (sorted, disjoint) interval holding each time, -1 where none does."""
    if not len(starts):
        return np.full(len(times), -1, dtype="int64")
    i = np.searchsorted(starts, times, side="right") - 1
    ok = (i >= 0) & (times <= ends[np.clip(i, 0, None)])
    return np.where(ok, i, -1)


def candidate_domains(nvtx: pd.DataFrame) -> list[str]:
    """Domains that may hold a program's stages: any but a library's own (LIBRARY_DOMAINS) and nsightflow's
    probe and operator domains."""
    names = nvtx["domain"].astype(str)
    keep = ~names.str.lower().isin(LIBRARY_DOMAINS) & ~names.map(is_nsightflows_own).astype(bool)
    return list(dict.fromkeys(names[keep]))


def guess_domain(nvtx: pd.DataFrame, launch_ns: np.ndarray) -> str:
    """The NVTX domain of a timeline's stages when nobody said (captures made elsewhere): of the candidate
    domains, the one whose ranges hold the most kernel launches (ties: the most ranges)."""
    best: tuple[int, int, str] | None = None
    for domain in candidate_domains(nvtx):
        top = top_level(nvtx[nvtx["domain"] == domain])
        held = int((window_of(launch_ns, top["start"].to_numpy(), top["end"].to_numpy()) >= 0).sum())
        score = (held, len(top), domain)
        best = score if best is None or score[:2] > best[:2] else best
    return best[2] if best else ""


def _nested_ranges(nvtx: pd.DataFrame, domain: str) -> pd.DataFrame:
    """Every range of ``domain`` (push/pop on the thread that opened most, start/end on any), with its depth
    (ranges of the domain it lies inside) and its exclusive time (its span less its direct children's)."""
    mine = nvtx[nvtx["domain"] == domain]
    if mine.empty:
        return mine.assign(stage=[], step=[], range_index=[], depth=[], exclusive_ns=[])
    pp = mine[mine["eventType"] == PUSH_POP]
    tid = pp["globalTid"].mode().iloc[0] if len(pp) else None
    mine = mine[(mine["eventType"] == START_END) | (mine["globalTid"] == tid)].sort_values(["start", "end"])
    mine = mine.reset_index(drop=True)
    starts, ends = mine["start"].to_numpy(), mine["end"].to_numpy()
    depth = np.zeros(len(mine), dtype="int64")
    exclusive = (ends - starts).astype("int64")
    stack: list[int] = []
    for i in range(len(mine)):
        while stack and not (starts[i] >= starts[stack[-1]] and ends[i] <= ends[stack[-1]]):
            stack.pop()
        if stack:
            exclusive[stack[-1]] -= ends[i] - starts[i]
        depth[i] = len(stack)
        stack.append(i)
    mine["depth"], mine["exclusive_ns"] = depth, exclusive
    mine["stage"] = mine["name"].astype(str)
    mine["range_index"] = mine.groupby("stage").cumcount()
    mine["step"] = mine["payload"].where(mine["payload"].notna(), mine["range_index"]).astype("int64")
    return mine


def _innermost(times: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Index (into ``ranges``) of the deepest range holding each time, -1 where none does."""
    out = np.full(len(times), -1, dtype="int64")
    for depth in sorted(set(ranges["depth"])):
        level = ranges[ranges["depth"] == depth]
        owner = window_of(times, level["start"].to_numpy(), level["end"].to_numpy())
        hit = owner >= 0
        out[hit] = level.index.to_numpy()[owner[hit]]
    return out


def read_timeline(sqlite_path: str | Path, domain: str | None, nested: bool = False) -> Timeline:
    """Attribute every kernel of an nsys SQLite export to the harness's stage steps and probe units.

    ``domain``: the NVTX domain of the stage ranges (None, or with ``nested`` a domain the export has no range
    of: guessed, see ``guess_domain``). ``nested`` (captures made by hand): every range of the domain is a stage step,
    ranges may nest, and a kernel belongs to the innermost range holding its launch; a range name that only
    holds other ranges is a container, not a stage. Otherwise (nsightflow's harness) the stages are the
    top-level ranges."""
    path = Path(sqlite_path)
    nvtx, k, names, gpu = nsys_sqlite.load(path, domain)  # a job of several ranks: the profiled one's
    has = set(nvtx["domain"].astype(str))
    if domain is None or (nested and domain not in has and probe_domain(domain) not in has):
        domain = guess_domain(nvtx, k["launch_ns"].to_numpy())
    ranges = _nested_ranges(nvtx, domain) if nested else _harness_ranges(nvtx, domain)
    probes = _harness_ranges(nvtx, probe_domain(domain))
    stands_in = ranges.empty and not probes.empty  # the probe pass alone was traced: its steps are the stages'
    if stands_in:
        ranges = _nested_ranges(nvtx, probe_domain(domain)) if nested else probes
    k = own_process(k, ranges)
    ops = nvtx[(nvtx["domain"] == ops_domain(domain)) & (nvtx["eventType"] == PUSH_POP)]
    # Operator calls per stage in the probe pass, any thread (the analytic count of the same pass made as many).
    of_call = window_of(ops["start"].to_numpy(), probes["start"].to_numpy(), probes["end"].to_numpy())
    calls = pd.Series(probes["stage"].to_numpy()[of_call[of_call >= 0]]) if len(probes) else pd.Series(dtype=object)
    probe_calls = {str(k_): int(v) for k_, v in calls.value_counts().items()}
    ops = top_level(ops).reset_index(drop=True)

    t = k["launch_ns"].to_numpy()
    parts = []
    for pass_, rng in (("ranged", ranges), ("probe", probes)):
        if rng.empty:
            continue
        owner = (
            _innermost(t, rng)
            if nested and pass_ == "ranged"
            else window_of(t, rng["start"].to_numpy(), rng["end"].to_numpy())
        )
        sel = owner >= 0
        part = k[sel].copy()
        own = rng.iloc[owner[sel]]
        part["pass_"] = pass_
        part["stage"] = own["stage"].to_numpy()
        part["step"] = own["step"].to_numpy()
        part["range_index"] = own["range_index"].to_numpy()
        parts.append(part)
    if not parts:
        launches = pd.DataFrame(columns=LAUNCH_COLUMNS)
    else:
        launches = pd.concat(parts, ignore_index=True)
        launches["unit"], launches["op"] = _units(launches, ops, probes)
        launches["smem"] = launches["smem"].fillna(0).astype("int64")
        launches["mangledName"] = launches["mangledName"].fillna(launches["demangledName"])
        _describe_kernels(launches, names)
        launches["duration_ns"] = launches["end"] - launches["start"]
        launches["graph"] = launches["graphNodeId"].notna()
        launches = launches.sort_values(["pass_", "launch_ns", "start"], kind="stable", ignore_index=True)
        launches["seq"] = launches.groupby(["pass_", "stage", "step"]).cumcount()
        launches = _classes(launches)[LAUNCH_COLUMNS]
    counts = nvtx.loc[nvtx["domain"] == domain, "name"].astype(str).value_counts().to_dict()
    containers: list[str] = []
    if nested and len(ranges):
        # a range name that launched nothing itself and whose every instance holds a deeper range: a container
        held = ranges["stage"].isin(set(launches["stage"]))
        parent = np.zeros(len(ranges), dtype=bool)
        deeper = ranges["depth"].to_numpy()
        parent[:-1] = deeper[1:] > deeper[:-1]
        by_name = pd.Series(parent, index=ranges.index).groupby(ranges["stage"]).all()
        containers = sorted(set(by_name[by_name].index) - set(ranges.loc[held, "stage"]))
        ranges = ranges[~ranges["stage"].isin(containers)]
    if "exclusive_ns" not in ranges.columns:
        ranges = ranges.assign(exclusive_ns=ranges["end"] - ranges["start"])
    return Timeline(
        launches=launches,
        ranges=ranges[["stage", "step", "range_index", "start", "end", "globalTid", "exclusive_ns"]]
        .rename(columns={"globalTid": "tid"})
        .reset_index(drop=True),
        probe_ops=ops,
        gpu_name=gpu,
        source=str(path),
        domain=domain,
        range_counts={str(k_): int(v) for k_, v in counts.items()},
        containers=containers,
        probe_calls=probe_calls,
        probe_stands_in=stands_in,
    )


KERNEL_FIELDS = ["demangledName", "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "smem"]


def _describe_kernels(launches: pd.DataFrame, names: dict[int, str]) -> None:
    """kernel, mangled, grid, block and kernel_key columns, built once per distinct launch configuration
    (a timeline of a million launches has a few hundred) and spread by code."""
    codes, uniques = pd.MultiIndex.from_frame(launches[KERNEL_FIELDS]).factorize()
    u = pd.DataFrame(list(uniques), columns=KERNEL_FIELDS)
    kernel = u["demangledName"].map(names).fillna("?")
    mangled = u["mangledName"].map(names).fillna(kernel)
    grid = [f"({x}, {y}, {z})" for x, y, z in zip(u["gridX"], u["gridY"], u["gridZ"], strict=True)]
    block = [f"({x}, {y}, {z})" for x, y, z in zip(u["blockX"], u["blockY"], u["blockZ"], strict=True)]
    key = [f"{m}|{g}|{b}|{sm}" for m, g, b, sm in zip(mangled, grid, block, u["smem"], strict=True)]
    for col, values in (
        ("kernel", kernel.to_numpy()),
        ("mangled", mangled.to_numpy()),
        ("grid", grid),
        ("block", block),
        ("kernel_key", key),
    ):
        launches[col] = np.asarray(values, dtype=object)[codes]


def _units(launches: pd.DataFrame, ops: pd.DataFrame, probes: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Probe-pass unit of each launch (see nsightflow.capture.inside.probe) and the operator call that launched it.

    Unit: 2·i+1 inside its step's i-th operator, 2·i in the gap before it; -1 where the step's operators
    overlap in time (dispatched by two threads at once), so which one launched a kernel is unknown, and
    -1 for ranged-pass launches. Operator: the call's signature (the op range's message), 'gap' outside one.
    """
    units = np.full(len(launches), -1, dtype="int64")
    names = np.full(len(launches), "", dtype=object)
    probe = (launches["pass_"] == "probe").to_numpy()
    if not probe.any():
        return units, names
    names[probe] = "gap"
    if ops.empty:
        units[probe] = 0  # no operator marks: the whole step is the gap before its first operator
        return units, names
    starts, ends = ops["start"].to_numpy(), ops["end"].to_numpy()
    index = ops["payload"].fillna(-1).astype("int64").to_numpy()
    texts = ops["name"].astype(str).to_numpy()
    op_step = window_of(starts, probes["start"].to_numpy(), probes["end"].to_numpy())
    overlap = np.zeros(len(starts), dtype=bool)
    overlap[1:] = starts[1:] < np.maximum.accumulate(ends)[:-1]
    bad_steps = set(op_step[overlap | np.roll(overlap, -1)])
    t = launches["launch_ns"].to_numpy()[probe]
    step_of = window_of(t, probes["start"].to_numpy(), probes["end"].to_numpy())
    i = np.searchsorted(starts, t, side="right") - 1
    j = np.clip(i, 0, None)
    same_step = (i >= 0) & (op_step[j] == step_of)
    inside = same_step & (t <= ends[j])
    unit = np.where(inside, 2 * index[j] + 1, np.where(same_step, 2 * (index[j] + 1), 0))
    unit[np.isin(step_of, list(bad_steps))] = -1
    units[probe] = unit
    names[probe] = np.where(inside, texts[j], "gap")
    return units, names


def _classes(launches: pd.DataFrame) -> pd.DataFrame:
    """Class keys, twins and structures (see Timeline)."""
    probe = (launches["pass_"] == "probe").to_numpy()
    launches["class_key"] = launches["kernel_key"]
    if probe.any():
        p = launches[probe]
        ordinal = p.groupby(["stage", "step", "unit"]).cumcount()
        codes, uniques = pd.MultiIndex.from_arrays([p["op"], ordinal, p["kernel_key"]]).factorize()
        keys = np.asarray([f"{op}#{k}|{kk}" for op, k, kk in uniques], dtype=object)
        launches.loc[probe, "class_key"] = keys[codes]

    # Per pass and step: the sequence of kernel keys (a twin must match it exactly), and of kernels alone
    # (the structure: positions correspond, a grid that grows with the step is work that grows with it).
    def sequence_ids(col: str, name: str) -> pd.DataFrame:
        code = pd.Series(pd.factorize(launches[col])[0], index=launches.index)
        seqs = code.groupby([launches["pass_"], launches["stage"], launches["step"]], sort=False).agg(tuple)
        return pd.Series(pd.factorize(seqs)[0], index=seqs.index, name=name).reset_index()

    seq_id = sequence_ids("kernel_key", "seq_id")
    ranged = seq_id[seq_id["pass_"] == "ranged"].drop(columns="pass_")
    probes = seq_id[seq_id["pass_"] == "probe"].drop(columns="pass_").rename(columns={"seq_id": "probe_id"})
    structures = sequence_ids("mangled", "structure")
    steps = ranged.merge(probes, on=["stage", "step"], how="left").merge(
        structures[structures["pass_"] == "ranged"].drop(columns="pass_"), on=["stage", "step"], how="left"
    )
    steps["twin"] = steps["seq_id"] == steps["probe_id"]
    merged = launches[["stage", "step"]].merge(
        steps[["stage", "step", "twin", "structure"]], on=["stage", "step"], how="left"
    )
    launches["twin"] = merged["twin"].fillna(False).astype(bool).to_numpy()
    launches["structure"] = merged["structure"].fillna(-1).astype("int64").to_numpy()
    # A ranged launch in a step with a twin takes its twin's class and operator call (same step, same position).
    mine = ~probe & launches["twin"].to_numpy()
    if mine.any():
        by_pos = launches.loc[probe, ["stage", "step", "seq", "class_key", "op"]]
        twin = launches.loc[mine, ["stage", "step", "seq"]].merge(by_pos, on=["stage", "step", "seq"], how="left")
        launches.loc[mine, "class_key"] = twin["class_key"].to_numpy()
        launches.loc[mine, "op"] = twin["op"].to_numpy()
    return launches


def call_classes(launches: pd.DataFrame) -> np.ndarray:
    """Whether each launch's class names an operator call (a probe-pass operator, or a ranged launch's twin of
    one): such a launch does the same work wherever its call recurs, in any step of its stage (the same operator,
    shapes, dtypes, strides and arguments launching the same kernel, grid, block and shared memory). Launches
    between operators (a CUDA-graph replay, compiled code) are identified only by their position in a step: a
    replayed graph reads its sizes from memory, so its kernels can do other work in another step."""
    if "op" not in launches.columns:
        return np.zeros(len(launches), dtype=bool)
    op = launches["op"].fillna("").astype(str)
    return (op != "").to_numpy() & (op != "gap").to_numpy()


def stage_table(tl: Timeline) -> pd.DataFrame:
    """Wall time per stage from the harness's ranges: domain-free columns stage, range_instances, wall_ns (a
    nested range's own time: its span less its children's, so nested stages' times add up)."""
    r = tl.ranges.assign(wall=tl.ranges["exclusive_ns"])
    out = r.groupby("stage", sort=False).agg(range_instances=("step", "size"), wall_ns=("wall", "sum")).reset_index()
    out["wall_ns"] = out["wall_ns"].astype("float64")
    return out


def kernel_table(tl: Timeline) -> pd.DataFrame:
    """GPU time and launches per (stage, kernel) of the ranged pass; columns as
    nsightflow.capture.read.nsys_stats.kernel_table."""
    ranged = tl.launches[tl.launches["pass_"] == "ranged"]
    n_ranges = tl.ranges.groupby("stage").size().rename("range_instances")
    out = ranged.groupby(["stage", "kernel"], as_index=False, sort=False).agg(
        instances=("duration_ns", "size"), total_ns=("duration_ns", "sum"), classes=("class_key", "nunique")
    )
    out["total_ns"] = out["total_ns"].astype("float64")
    out = out.merge(n_ranges, left_on="stage", right_index=True, how="left")
    out["launches_per_range"] = out["instances"] / out["range_instances"]
    return out.sort_values(["stage", "total_ns"], ascending=[True, False], ignore_index=True)
