"""Per rank and stage of a job of several processes (torchrun, ``torch.multiprocessing``): each rank's steps, its
wall time as the program runs it, its kernels' busy time split into compute and communication, how much of the
communication ran while the rank's compute did (overlapped) and how much did not (exposed), and the slowest rank.

The timeline (nsys, following the process tree) holds every rank's stage steps in nsightflow's ranks domain
(nsightflow.capture.inside.hook); a kernel belongs to the step of its own process whose range holds its launch call,
from any thread of that process. The wall times come from the timed run in the manifest (the program unslowed), its
steady steps; the kernels' times are of the same steps, the warm-up steps (manifest ``warmup_steps``, by ordinal)
set apart in both: a rank's first collective, waiting for the others to start, is no part of its steady busy time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from nsightflow import columns
from nsightflow.analysis.diagnostics import note
from nsightflow.capture.read import nsys_sqlite
from nsightflow.capture.read.attribution import top_level, window_of
from nsightflow.capture.read.comm import busy_ns, is_comm, overlapped
from nsightflow.capture.read.nsys_sqlite import PUSH_POP
from nsightflow.domains import ranks_domain
from nsightflow.records import Diagnostic, Manifest


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=columns.names("ranks"))


def rank_launches(sqlite: str | Path, mirror: str) -> pd.DataFrame:
    """Every kernel launched inside a rank's stage step: pid, stage, step (the step's ordinal in its stage on that
    rank, as warm-up steps are named), kernel, start, end (from the export)."""
    con, _ = nsys_sqlite.connect(Path(sqlite))
    with con:  # millions of kernels over many ranks: only the ranks' step ranges and the kernels' times and names
        nvtx = nsys_sqlite.nvtx_events(con, domain=ranks_domain(mirror))
        k = nsys_sqlite.kernel_times(con)
        names = nsys_sqlite.strings(con, k["demangledName"].to_numpy(dtype=float))
    con.close()
    r = nvtx[(nvtx["domain"] == ranks_domain(mirror)) & (nvtx["eventType"] == PUSH_POP)]
    parts = []
    for pid, mine in r.groupby("pid"):
        steps = top_level(mine.sort_values(["start", "end"], ascending=[True, False]))
        steps = steps.assign(ordinal=steps.groupby("name", sort=False).cumcount())
        kk = k[k["pid"] == pid]
        owner = window_of(kk["launch_ns"].to_numpy(), steps["start"].to_numpy(), steps["end"].to_numpy())
        hit, own = kk[owner >= 0], steps.iloc[owner[owner >= 0]]
        parts.append(
            pd.DataFrame(
                {
                    "pid": int(pid),
                    "stage": own["name"].to_numpy(),
                    "step": own["ordinal"].astype("int64").to_numpy(),
                    "name_id": hit["demangledName"].to_numpy(),
                    "start": hit["start"].to_numpy(),
                    "end": hit["end"].to_numpy(),
                }
            )
        )
    cols = ["pid", "stage", "step", "kernel", "start", "end", "comm"]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    # Millions of launches, a few hundred kernels: names and the communication test per distinct kernel.
    ids, codes = np.unique(out.pop("name_id").to_numpy(), return_inverse=True)
    kernels = pd.Series([names.get(int(i), f"? (string {i})") for i in ids])
    out["kernel"] = pd.Categorical.from_codes(codes, categories=pd.Index(kernels))
    out["comm"] = is_comm(kernels)[codes]
    out["stage"] = out["stage"].astype("category")
    return out[cols]


def rank_table(launches: pd.DataFrame, manifest: Manifest) -> pd.DataFrame:
    """Per (rank, stage) of the manifest's ranks: steps and wall (timed run), and from ``launches`` (rank_launches;
    empty for a backend without a timeline) busy, compute, communication, overlapped and exposed time."""
    if not manifest.ranks:
        return empty()
    if "comm" not in launches:
        launches = launches.assign(comm=is_comm(launches["kernel"]) if len(launches) else np.zeros(0, dtype=bool))
    if manifest.warmup_steps and len(launches):  # the same steps as the walls: the steady ones (a few warm-up steps)
        warm = np.zeros(len(launches), dtype=bool)
        stage, step = launches["stage"].astype(str).to_numpy(), launches["step"].to_numpy()
        for w in manifest.warmup_steps:
            warm |= (stage == str(w["stage"])) & (step == int(w["step"]))
        launches = launches[~warm]
    launches = launches.assign(wait=collective_waits(launches))
    # one pass over the (millions of) launches: each rank's stage
    groups = {
        (int(key[0]), str(key[1])): g
        for key, g in ((cast(tuple[Any, ...], k), g) for k, g in launches.groupby(["pid", "stage"], observed=True))
    }
    rows = []
    for s in manifest.stages:  # stage by stage, the ranks side by side
        stage = s["name"]
        for r in manifest.ranks:
            walls = (r.get("program_wall_s") or {}).get(stage) or (r.get("stage_wall_s") or {}).get(stage) or []
            row = {
                "rank": r.get("rank"),
                "stage": stage,
                "pid": r["pid"],
                "device": r.get("device"),
                "steps": len(walls),
                "wall_ms": float(np.sum(walls)) * 1e3 if walls else np.nan,
                "profiled": r.get("rank") == manifest.profiled_rank,
            }
            if len(launches):
                row.update(_busy(groups.get((int(r["pid"]), stage), launches.iloc[0:0])))
            rows.append(row)
    out = pd.DataFrame(rows)
    per_step = per_step_ms(out)  # ranks may run unequal step counts: compared per step, never by totals
    out["wall_ms_per_step"] = per_step
    out["slowest"] = per_step.eq(per_step.groupby(out["stage"]).transform("max")) & per_step.notna()
    return out.reindex(columns=columns.names("ranks"))


def collective_waits(launches: pd.DataFrame) -> np.ndarray:
    """Each launch's time waiting for a slower rank (ns): a collective runs until its last rank joins, so the n-th
    launch of a communication kernel in a step of a stage takes, on each rank, its transfer plus its wait for the
    others; the shortest of it over the ranks is the transfer (the last to join waits least), the rest waiting. A
    launch seen on one rank alone is NaN (nothing to compare with); a compute launch 0."""
    out = np.zeros(len(launches), dtype="float64")
    comm = launches["comm"].to_numpy(dtype=bool) if len(launches) else out.astype(bool)
    if not comm.any():
        return out
    pos = np.flatnonzero(comm)
    c = launches.iloc[pos].reset_index(drop=True).assign(at=pos).sort_values("start", kind="stable")
    dur = (c["end"] - c["start"]).astype("float64")
    nth = c.groupby(["pid", "stage", "step", "kernel"], observed=True, sort=False).cumcount()
    same = dur.groupby([c["stage"].astype(str), c["step"], c["kernel"].astype(str), nth], sort=False)
    out[c["at"].to_numpy()] = (dur - same.transform("min")).where(same.transform("size") > 1).to_numpy()
    return out


def per_step_ms(table: pd.DataFrame) -> pd.Series:
    """Each rank's stage wall per step (ms): its total over its own step count."""
    steps = pd.to_numeric(table["steps"], errors="coerce")
    return (pd.to_numeric(table["wall_ms"], errors="coerce") / steps.where(steps > 0)).astype(float)


def _busy(g: pd.DataFrame) -> dict[str, Any]:
    """Busy, compute and communication time of one rank's stage, and its communication overlapped by compute."""
    dur = (g["end"] - g["start"]).to_numpy(dtype="float64")
    comm = g["comm"].to_numpy(dtype=bool)
    c = g[comm]
    compute = g[~comm]
    hidden = overlapped(
        c["start"].to_numpy(), c["end"].to_numpy(), compute["start"].to_numpy(), compute["end"].to_numpy()
    ).sum()
    comm_ns = float(dur[comm].sum())
    starts, ends = g["start"].to_numpy(), g["end"].to_numpy()
    return {  # busy and compute: the time some such kernel ran (streams overlap: counted once)
        "gpu_busy_ms": busy_ns(starts, ends) / 1e6,
        "compute_ms": busy_ns(starts[~comm], ends[~comm]) / 1e6,
        "comm_ms": comm_ns / 1e6,
        "comm_overlapped_ms": float(hidden) / 1e6,
        "comm_exposed_ms": (comm_ns - float(hidden)) / 1e6,
        "comm_wait_ms": float(g["wait"].to_numpy()[comm].sum()) / 1e6,
        "launches": int(len(g)),
        "comm_launches": int(comm.sum()),
    }


def no_launches() -> pd.DataFrame:
    """The launches of a backend without a timeline of kernels (torch.profiler): none."""
    return pd.DataFrame(columns=["pid", "stage", "step", "kernel", "start", "end"])


def rank_notes(table: pd.DataFrame, manifest: Manifest) -> list[Diagnostic]:
    """What a reader of a job of several processes must know: whose stages the counters are, the slowest rank
    per stage, and the communication left exposed."""
    if table.empty:
        return []
    notes = [
        note(
            "ranks",
            f"{table['rank'].nunique()} ranks: the stage table's counters are rank {manifest.profiled_rank}'s (config "
            "rank:); every rank's time, communication and overlap are in the ranks table (busy and communication times "
            "from the nsys run, in which every rank ran the same probe and count to keep the ranks in step).",
        )
    ]
    for stage, g in table.groupby("stage", sort=False):
        walls = per_step_ms(g).dropna()
        if len(walls) > 1 and walls.min() > 0:
            slow = g.loc[walls.sort_values().index[-1]]
            steps = sorted(set(g["steps"].astype(int)))
            unequal = f"; the ranks ran {' and '.join(map(str, steps))} steps" if len(steps) > 1 else ""
            notes.append(
                note(
                    str(stage),
                    f"rank {slow['rank']} is the slowest ({walls.max():.3f} ms a step, "
                    f"{walls.max() / walls.min() - 1:.1%} over the fastest rank{unequal}).",
                )
            )
        comm = g["comm_ms"].fillna(0)
        over = g[comm > g["wall_ms"]]
        if len(over):
            notes.append(
                note(
                    str(stage),
                    f"rank(s) {list(over['rank'])} spent longer in communication kernels under nsys than the "
                    "stage takes in the program: they waited in a collective for a peer slowed by profiling (the "
                    "waiting column), so their communication time is the profiled run's, not the program's.",
                )
            )
        if comm.max() > 0:
            exposed = g["comm_exposed_ms"].fillna(0)
            worst = g.loc[exposed.sort_values().index[-1]]
            wait = worst.get("comm_wait_ms", np.nan)
            waited = (
                f"; {wait:.3f} ms of it waiting for a slower rank (each collective's time beyond its shortest "
                "rank's), the rest moving data"
                if np.isfinite(wait)
                else ""
            )
            notes.append(
                note(
                    str(stage),
                    f"rank {worst['rank']} spends {worst['comm_ms']:.3f} ms in communication kernels, "
                    f"{worst['comm_exposed_ms']:.3f} ms of it exposed (no compute kernel of the rank running){waited}.",
                )
            )
    return notes
