"""Which of a command's NVTX ranges are its stages, and which of its processes is profiled: from the hook's records
of its runs (nsightflow.capture.inside.hook), the timed run's first."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nsightflow.capture.read.attribution import top_level
from nsightflow.capture.read.warmup import WarmupStep, Window, set_apart
from nsightflow.domains import AUTO_DOMAIN, LIBRARY_DOMAINS, is_nsightflows_own
from nsightflow.errors import CaptureError, WorkloadError
from nsightflow.mixes import mix_label


@dataclass(frozen=True)
class Discovery:
    """The stages a timed run of a command found: their domain, names (first seen first), their steady steps' wall
    times (``walls``), every step's (``every_wall``), the warm-up steps set apart (nsightflow.capture.read.warmup), and
    whether the program compiled (``torch.compile`` made graphs in any of its processes)."""

    domain: str
    stages: list[str]
    walls: dict[str, list[float]]
    how: str
    every_wall: dict[str, list[float]] = field(default_factory=dict)
    warmup: list[WarmupStep] = field(default_factory=list)
    compiles: bool = False
    tuning: dict[str, list[str]] = field(default_factory=dict)  # its autotuning choices (capture.hook_tuning)
    inputs: dict[str, list[dict[str, float] | None]] = field(default_factory=dict)  # each step's (hook_steps)
    inputs_errors: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # the program's own numbers (capture.read.own_metrics)
    every_pace: dict[str, list[float | None]] = field(default_factory=dict)  # each step's pace (step_clocks)

    @property
    def skip(self) -> dict[str, list[int]]:
        """Per stage, the ordinals of its warm-up steps (what every later run of the program only follows)."""
        out: dict[str, list[int]] = {}
        for w in self.warmup:
            out.setdefault(w.stage, []).append(w.step)
        return out

    def last_steps(self) -> dict[str, int]:
        """Per stage, how many of its steps run up to its last profiled one (a run under a profiler stops there)."""
        skip = self.skip
        return {k: max(i for i in range(len(v)) if i not in skip.get(k, ())) + 1 for k, v in self.every_wall.items()}

    def steady(self, every: dict[str, list[float]]) -> dict[str, list[float]]:
        """``every`` (stage → each step's value) without the warm-up steps."""
        skip = self.skip
        return {k: [x for i, x in enumerate(v) if i not in skip.get(k, ())] for k, v in every.items()}


# gpu_wall, gpu_start: the timed run's span of the range and its start on the GPU's clock (ns; 0 and -1: none, the
# host's stand): nsightflow.capture.inside.step_clock
RANGE_COLUMNS = ["domain", "name", "depth", "tid", "start", "end", "graphs", "gpu_wall", "gpu_start"]
_NONE = {"gpu_start": -1}  # a column a record lacks; else 0
MAX_SHAPES = 4  # automatic stages: a kind of call with more input shapes than this is one stage, not one per shape
AUTO_HOW = (
    "Automatic stages (the program opened no NVTX range): training iterations between optimizer steps and top-level "
    "module calls outside them, by gradient mode and input shape"
)


def auto_names(ranges: pd.DataFrame) -> pd.DataFrame:
    """The automatic stages' ranges (nsightflow.capture.inside.hook_auto) with a kind of top-level call that came with
    more than MAX_SHAPES input shapes named by its kind alone (``inference 1x7`` → ``inference``)."""
    auto = ranges["domain"] == AUTO_DOMAIN
    kind = ranges["name"].str.split(" ").str[0]
    shapes = ranges[auto].groupby(kind[auto])["name"].nunique()
    many = auto & kind.map(lambda k: shapes.get(k, 0) > MAX_SHAPES)
    return ranges.assign(name=ranges["name"].where(~many, kind))


def discover(
    record: dict[str, Any],
    domain: str | None,
    stages: list[str] | None,
    warmup: int | str = "auto",
    partial: bool = False,
    window: Window | None = None,
    functions: dict[str, str] | None = None,
) -> Discovery:
    """The stage steps of a command's timed run (its hook record): the ranges of ``domain`` named ``stages`` (else
    its top-level ones), one at a time (a stage range inside another step is part of that step). Without a domain,
    the candidate (not a library's, not nsightflow's) whose top-level ranges hold the most wall time. ``warmup``: the
    steps set apart (nsightflow.capture.read.warmup): "auto", or the first N of each stage. ``partial``: a stage this
    process never ran is left out, not an error (a rank of a job that does not evaluate, as nanoGPT's rank 1).
    ``window``: the steps profiled (the workload's ``window:``); the others are set apart with the warm-up.
    ``functions``: the workload's step functions (stage -> ``module:qualname``), whose calls are the steps."""
    rows = [list(r) + [_NONE.get(c, 0) for c in RANGE_COLUMNS[len(r) :]] for r in record.get("ranges") or []]
    ranges = auto_names(pd.DataFrame(rows, columns=RANGE_COLUMNS))
    how = AUTO_HOW if domain == AUTO_DOMAIN else f"the configured domain {domain!r}"
    if functions:
        how = "Steps from the functions the workload names (step_functions): each call of " + "; of ".join(
            f"{where} is a step of {stage!r}" for stage, where in functions.items()
        )
    own = ranges[ranges["domain"] != AUTO_DOMAIN]
    if domain is None:
        cand = own[
            ~own["domain"].str.lower().isin(LIBRARY_DOMAINS)
            & ~own["domain"].map(is_nsightflows_own).astype(bool)
            & (own["depth"] == 0)
        ]
        if not cand.empty:
            time_in = (cand["end"] - cand["start"]).groupby(cand["domain"]).sum()
            domain = str(time_in.idxmax())
            how = f"the domain whose top-level ranges hold the most time ({time_in[domain] / 1e9:.3f} s)"
        elif (ranges["domain"] == AUTO_DOMAIN).any():
            domain, how = AUTO_DOMAIN, AUTO_HOW
        else:
            raise WorkloadError(
                "the command opened no NVTX range, called no torch.nn.Module and stepped no torch.optim optimizer in "
                "a Python process nsightflow could follow: check that the command runs the program (a Python "
                "program started by python, torchrun or a script), or put its steps inside "
                "nvtx.annotate('name', domain='...') or torch.cuda.nvtx.range('name')"
            )
    elif own.empty and domain != AUTO_DOMAIN:
        raise WorkloadError(
            f"the workload names the NVTX domain {domain!r}{f' and stages {stages}' if stages else ''}, but the "
            "command opened no NVTX range: remove domain: and stages: from the workload to profile its automatic "
            "stages (training iterations and model calls), or add those ranges to the program"
        )
    warmup_n = None if warmup == "auto" else int(warmup)
    mine = ranges[ranges["domain"] == domain]
    if stages is not None:
        mine = mine[mine["name"].isin(stages)]
    else:
        mine = mine[mine["depth"] == 0]
    # one step at a time: a stage range inside another step (an enclosing range first) is part of that step
    mine = top_level(mine.sort_values(["start", "end"], ascending=[True, False]))
    seen = sorted(set(ranges.loc[ranges["domain"] == domain, "name"]))
    missing = [s for s in stages or [] if s not in set(mine["name"])]
    if not partial and (mine.empty or missing):
        raise WorkloadError(
            f"the command's NVTX domain {domain!r} has no range named {missing or stages}: it has "
            f"{seen[:20] or 'none'}; fix the workload's stages: (or domain:, '' for the default domain)"
        )
    walls: dict[str, list[float]] = {}
    paces, each = step_clocks(mine)
    graphs: dict[str, list[int]] = {}
    inside: dict[str, list[bool]] = {}
    for ordinal, (name, made, wall) in enumerate(zip(mine["name"], mine["graphs"], each, strict=True)):
        walls.setdefault(str(name), []).append(wall)
        graphs.setdefault(str(name), []).append(int(made))
        inside.setdefault(str(name), []).append(window is None or window.holds(ordinal))
    if window is not None:
        outside = [k for k, v in inside.items() if not any(v)]
        if len(outside) == len(walls):
            raise WorkloadError(
                f"the workload's window ({window}) holds none of the {len(mine)} steps the program ran: start it "
                f"at most at step {len(mine) - 1}, or run the program longer"
            )
        for k in outside:  # a stage that never ran inside the window is not one of the window's stages
            del walls[k], graphs[k], inside[k], paces[k]
    summaries = record.get("step_inputs") or {}  # each step's batch, where step_inputs summarise it: judged by mix
    mixes = {k: [mix_label(s, True) for s in v] for k, v in summaries.items() if k in walls and len(v) == len(walls[k])}
    apart = [
        w
        for stage, v in walls.items()
        for w in set_apart(stage, v, graphs[stage], warmup_n, inside[stage] if window else None, mixes.get(stage))
    ]
    found = Discovery(domain, list(walls), walls, how, walls, apart, bool(record.get("compiled_graphs")))
    return Discovery(domain, list(walls), found.steady(walls), how, walls, apart, found.compiles, every_pace=paces)


def step_clocks(steps: pd.DataFrame) -> tuple[dict[str, list[float | None]], list[float]]:
    """Each step's pace (s, by stage) and wall (s, in the rows' order), from the timed run's host clock and the GPU's
    clock where the step was clocked there (nsightflow.capture.inside.step_clock samples the steps).

    A step's pace runs from its start to the start of its stage's next step where that is the next step its thread
    runs (None where another stage's step, or none, comes next). Unlike its range's wall it holds what the program
    does between two steps (the loop's own Python, a context manager around the range): what a loop's own clock, its
    time per token, measures. Between two clocked steps of one such run (a stretch), the GPU's time from the first's
    start to the second's is shared among the stretch's steps in proportion to their host paces: one step, its pace
    on the GPU's clock; a loop whose host runs ahead of its GPU, the GPU's pace, step by step as the host's varied
    (a compilation step keeps its length). A step outside every stretch keeps its host pace.

    A step's wall is its span on the GPU's clock where it has one (> 0), its host span where it was clocked and the
    GPU had no work left at its end; an unclocked step, its host span and the mean of what the nearest clocked steps
    of its stage on its thread before it and after it (in its run or another: a run of a few steps may have none
    clocked) had beyond their host spans (the GPU's tail of a host-bound step, the launch queue's lag of a GPU-bound
    one); a stage with no clocked step on its thread, its host span.

    ``steps``: a run's stage steps (RANGE_COLUMNS), in the order they started."""
    names, tids = steps["name"].astype(str).tolist(), steps["tid"].astype(int).tolist()
    starts, ends = steps["start"].astype(int).tolist(), steps["end"].astype(int).tolist()
    gpu, spans = steps["gpu_start"].astype(int).tolist(), steps["gpu_wall"].astype(int).tolist()
    walls = [(g if g > 0 else e - s) / 1e9 for s, e, g in zip(starts, ends, spans, strict=True)]
    paces: dict[str, list[float | None]] = {}
    at: list[int] = []  # each row's index in its stage's list
    for name in names:
        at.append(len(paces.setdefault(name, [])))
        paces[name].append(None)
    runs: list[list[int]] = []  # rows of one thread's consecutive steps of one stage
    open_run: dict[int, list[int]] = {}
    for row, (name, tid) in enumerate(zip(names, tids, strict=True)):
        run = open_run.get(tid)
        if run is None or names[run[-1]] != name:
            run = open_run[tid] = []
            runs.append(run)
        run.append(row)
    for run in runs:
        host = [(starts[n] - starts[r]) for r, n in zip(run, run[1:], strict=False)]
        for j, h in enumerate(host):
            paces[names[run[j]]][at[run[j]]] = h / 1e9
        clocked = [j for j, r in enumerate(run) if gpu[r] >= 0]
        for a, b in zip(clocked, clocked[1:], strict=False):
            on_gpu, on_host = gpu[run[b]] - gpu[run[a]], sum(host[a:b])
            for j in range(a, b):
                share = host[j] / on_host if on_host > 0 else 1 / (b - a)
                paces[names[run[j]]][at[run[j]]] = on_gpu * share / 1e9
    # an unclocked step's wall: its host span and what the nearest clocked steps of its stage on its thread (in its run
    # or another: a short run may have none) held on the GPU beyond their host spans
    clocked_rows: dict[tuple[str, int], list[int]] = {}
    for r, key in enumerate(zip(names, tids, strict=True)):
        if gpu[r] >= 0:
            clocked_rows.setdefault(key, []).append(r)
    beyond = [w - (e - s) / 1e9 for w, s, e in zip(walls, starts, ends, strict=True)]
    for r, key in enumerate(zip(names, tids, strict=True)):
        rows = clocked_rows.get(key)
        if gpu[r] >= 0 or not rows:
            continue
        after = bisect.bisect(rows, r)  # the nearest clocked steps: rows[after - 1] < r < rows[after]
        near = [beyond[rows[k]] for k in (after - 1, after) if 0 <= k < len(rows)]
        walls[r] = max(0.0, walls[r] + sum(near) / len(near))
    return paces, walls


def _active(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of processes that ran stage steps (or, timed, opened ranges): a job's ranks."""
    return [r for r in records if r.get("steps") or r.get("ranges")]


def primary(records: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    """The record of the process whose stages are profiled: the only one that opened ranges, else rank ``rank``."""
    active = _active(records)
    if len(active) <= 1:
        return active[0] if active else records[0]  # none: discovery says the program opened no range
    mine = [r for r in active if r.get("rank") == rank]
    if len(mine) != 1:
        ranks = sorted(str(r.get("rank")) for r in active)
        raise WorkloadError(
            f"the command ran {len(active)} processes with NVTX ranges (ranks {', '.join(ranks) or 'none'}), and "
            f"{'none' if not mine else 'several'} of rank {rank}: set the workload's rank: to one of them (a "
            "process's rank is its RANK variable, or its torch.distributed rank at its first stage step)"
        )
    return mine[0]


def rank_rows(timed: list[dict[str, Any]], profiled: list[dict[str, Any]], found: Discovery) -> list[dict[str, Any]]:
    """Per rank of a job of several processes: rank, pid and device in the profiled run, and each stage's step
    times in the timed run (the program's own) and in the profiled one; [] for a single process."""
    active = _active(profiled)
    if len(active) < 2:
        return []
    walls = {
        r.get("rank"): found.steady(discover(r, found.domain, found.stages, partial=True).every_wall)
        for r in _active(timed)
    }
    return [
        {
            "rank": r.get("rank"),
            "pid": r["pid"],
            "device": r.get("device"),
            "program_wall_s": walls.get(r.get("rank"), {}),
            "stage_wall_s": r.get("steps") or {},
        }
        for r in sorted(active, key=lambda r: (r.get("rank") is None, r.get("rank"), r["pid"]))
    ]


def same_steps(timed: Discovery, other: dict[str, Any], what: str) -> None:
    got = {k: len(v) for k, v in (other.get("steps") or {}).items()}
    want = {k: len(v) for k, v in timed.walls.items()}
    if got != want:
        raise CaptureError(
            f"the command ran other stage steps in its {what} run {got} than in its timed run {want}: a program "
            "whose ranges change from run to run cannot be sampled (seed it, or fix its step count)"
        )
