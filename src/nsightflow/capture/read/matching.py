"""Join ncu results to the timeline launches they measured: by plan order, or (captures made elsewhere) by search.

A kernel is identified by its mangled name, which nsys and ncu print identically (nsightflow exports
ncu's results with ``--print-kernel-base mangled``; checked on every kernel of the corpus of real programs
in tests/data/kernel_names). Exports made by hand with ncu's default demangled names are compared through
a key both tools' demangling agrees on (see ``name_key``). Grid and block sizes must agree exactly. A result
that cannot be joined is an error naming the result and what differed: a wrong join would put one kernel's
counters on another.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from nsightflow.domains import probe_domain
from nsightflow.errors import MatchError

JOINED = ["stage", "step", "class_key", "kernel", "grid", "block"]


# A C-style cast in front of a template argument's value, as nsys demangles it and ncu does not:
# (int)4, (unsigned long)1, (bool)0, (at::native::ADAM_MODE)1, (cub::SortOrder)0.
_CAST = re.compile(r"\((?:[A-Za-z_][\w:]*(?: [A-Za-z_]\w*)*)\)(?=-?\d)")
_QUALIFIER = re.compile(r"(?:\b[A-Za-z_]\w*|<unnamed>)::")


def name_key(name: str) -> str:
    """A demangled kernel name with what differs between nsys's and ncu's demangling removed.

    nsys prints casts before template values (``(int)4``, ``(at::native::ADAM_MODE)1``) and full
    namespaces (``at::native::``, CUB's ``at_cuda_detail::cub::detail::``); ncu prints neither. Dropping
    every cast and namespace qualifier leaves a key both agree on (every kernel of the name corpus).
    """
    return _QUALIFIER.sub("", _CAST.sub("", str(name))).replace(" ", "")


def kernel_agrees(ncu_name: str, mangled: str, demangled: str) -> bool:
    """Whether an ncu result's kernel name is the timeline launch's: its mangled name exactly (nsightflow's
    exports), else, for an export with demangled names, the same ``name_key``."""
    return str(ncu_name) == str(mangled) or name_key(ncu_name) == name_key(demangled)


def match_to_plan(results: pd.DataFrame, expected: pd.DataFrame, capture: str) -> pd.DataFrame:
    """Attach stage, step, class and the timeline's kernel name to each result: the k-th result is the k-th
    planned launch, and its grid, block and name key must agree."""
    if len(results) != len(expected):
        raise MatchError(
            f"capture {capture}: ncu profiled {len(results)} launches, the plan names {len(expected)}; "
            "the program's launches changed between the nsys and ncu runs (non-deterministic dispatch?)"
        )
    res = results.sort_values("ncu_id").reset_index(drop=True)
    exp = expected.reset_index(drop=True)
    bad = [
        i
        for i in range(len(res))
        if str(res.loc[i, "grid"]) != str(exp.loc[i, "grid"])
        or str(res.loc[i, "block"]) != str(exp.loc[i, "block"])
        or not kernel_agrees(res.loc[i, "ncu_kernel"], exp.loc[i, "mangled"], exp.loc[i, "kernel"])
    ]
    if bad:
        i = bad[0]
        raise MatchError(
            f"capture {capture}: result {i} (ncu ID {res.loc[i, 'ncu_id']}) differs from the planned launch: ncu "
            f"{str(res.loc[i, 'ncu_kernel'])[:100]} grid {res.loc[i, 'grid']} block {res.loc[i, 'block']}; timeline "
            f"{str(exp.loc[i, 'kernel'])[:100]} grid {exp.loc[i, 'grid']} block {exp.loc[i, 'block']} "
            f"({exp.loc[i, 'stage']} step {exp.loc[i, 'step']}); {len(bad)} results differ"
            + _why_shapes_differ(str(res.loc[i, "ncu_kernel"]), str(exp.loc[i, "mangled"]), str(exp.loc[i, "kernel"]))
        )
    for col in JOINED + [c for c in ("unit", "role") if c in exp.columns]:
        res[col] = exp[col].to_numpy()
    res["capture"] = capture
    return res


def _why_shapes_differ(ncu_name: str, mangled: str, demangled: str) -> str:
    """The cause, where it is known: a Triton kernel that torch.compile's autotuner gave another launch shape."""
    if kernel_agrees(ncu_name, mangled, demangled) and ncu_name.startswith("triton_"):
        return (
            ". The same Triton kernel ran with another launch shape: torch.compile's autotuner timed its candidate "
            "configurations again in the ncu launch, where ncu slows every launch, and chose another one, so the "
            "program ran other kernels under ncu than in its timeline"
        )
    return ""


def _stage_of(stack: list[dict[str, Any]] | None, domain: str) -> tuple[str, str, int] | None:
    """(pass, stage, step) from an ncu NVTX stack: the range in the stages' domain (ranged pass) or in
    nsightflow's probe domain (a capture of the probe pass); None when neither is on the stack."""
    for entry in reversed(stack or []):
        if entry["domain"] == domain:
            return "ranged", entry["range"], entry["payload"]
        if entry["domain"] == probe_domain(domain):
            return "probe", entry["range"], entry["payload"]
    return None


def search_timeline(results: pd.DataFrame, launches: pd.DataFrame, domain: str, capture: str) -> pd.DataFrame:
    """Join the results of one export made without a plan (captures made elsewhere) to timeline launches.

    Each result's stage and step come from the NVTX stack ncu recorded (the innermost range of the stages'
    domain, or of nsightflow's probe domain for a capture of the probe pass); inside a step the results are an
    ordered subsequence of the step's launches, matched greedily on kernel name, grid and block. A result with
    no such range on its stack (launched outside the stages, or by a thread that did not open them) is kept
    with no stage; an export with none at all is an error (made without --nvtx, or of another program).
    """
    res = results.sort_values("ncu_id").reset_index(drop=True)
    where = [_stage_of(s, domain) for s in res["nvtx_stack"]]
    if res["nvtx_stack"].map(lambda s: not s).all():
        raise MatchError(
            f"{capture}: no result has an NVTX range on its stack: capture with ncu --nvtx, inside the stages' ranges"
        )
    if all(w is None for w in where):
        raise MatchError(
            f"{capture}: no result has a range of NVTX domain {domain!r} on its stack: set config nvtx_domain to "
            "the domain of the stages' ranges, or capture the program that made the timeline"
        )
    placed = [w is not None for w in where]
    unplaced = res[[not p for p in placed]]
    res = res[placed].reset_index(drop=True)
    where = [w for w in where if w is not None]
    res["_pass"], res["_stage"], res["_step"] = zip(*where, strict=True)
    rows: list[dict[str, Any]] = []
    for (pass_, stage, payload), group in res.groupby(["_pass", "_stage", res["_step"].fillna(-1)], sort=False):
        step = int(payload)
        mine = launches[(launches["pass_"] == pass_) & (launches["stage"] == stage)]
        cand = mine[(mine["step"] == step) if step >= 0 else (mine["range_index"] == 0)]
        if cand.empty:
            raise MatchError(
                f"{capture}: the timeline has no launches in NVTX range {stage!r} step {step} that the "
                "export names: were the nsys and ncu captures made from the same program?"
            )
        cand = cand.sort_values("seq").reset_index(drop=True)
        keys = list(zip(cand["mangled"], cand["kernel"], cand["grid"], cand["block"], strict=True))
        j = 0
        for i, r in group.iterrows():
            name, grid, block = r["ncu_kernel"], str(r["grid"]), str(r["block"])
            while j < len(keys) and not (
                keys[j][2] == grid and keys[j][3] == block and kernel_agrees(name, keys[j][0], keys[j][1])
            ):
                j += 1
            if j == len(keys):
                raise MatchError(
                    f"{capture}: ncu result {int(r['ncu_id'])} ({str(r['ncu_kernel'])[:80]} grid {r['grid']}) "
                    f"has no matching launch in {stage} step {step} of the timeline: were the nsys and "
                    "ncu captures made from the same program and configuration?"
                )
            rows.append({**cand.loc[j, JOINED].to_dict(), "_result": i})
            j += 1
    out = res.drop(columns=["_pass", "_stage", "_step"])
    joined = pd.DataFrame(rows).set_index("_result")
    for col in JOINED:
        out[col] = joined[col]
    out = pd.concat([out, unplaced.assign(**{c: None for c in JOINED})], ignore_index=True)
    out["capture"] = capture
    return out
