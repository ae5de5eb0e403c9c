"""Join ncu results to the timeline launches they measured: by plan order, or (captures made elsewhere) by search.

ncu prints shortened kernel names, so names are compared through a key both tools agree on; grid
and block sizes must agree exactly. A result that cannot be joined is an error naming the result and
what differed: a wrong join would put one kernel's counters on another.
"""

from __future__ import annotations

import re

import pandas as pd

from nsightflow.harness import probe_domain

JOINED = ["stage", "step", "class_key", "kernel", "grid", "block"]


class MatchError(ValueError):
    """ncu results and the timeline disagree; the message says where."""


def name_key(name: str) -> str:
    """A kernel name with what differs between nsys's and ncu's demangling removed.

    ncu drops casts such as ``(int)`` / ``(unsigned long)`` and the ``native::`` namespace that
    nsys keeps; dropping every namespace qualifier and cast leaves a key both agree on.
    """
    name = re.sub(r"\((?:unsigned |signed )?(?:int|long|short|char|bool|long long)\)", "", str(name))
    return re.sub(r"(?:\b[A-Za-z_]\w*|<unnamed>)::", "", name).replace(" ", "")


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
        or name_key(res.loc[i, "ncu_kernel"]) != name_key(exp.loc[i, "kernel"])
    ]
    if bad:
        i = bad[0]
        raise MatchError(
            f"capture {capture}: result {i} (ncu ID {res.loc[i, 'ncu_id']}) differs from the planned launch: ncu "
            f"{str(res.loc[i, 'ncu_kernel'])[:100]} grid {res.loc[i, 'grid']} block {res.loc[i, 'block']}; timeline "
            f"{str(exp.loc[i, 'kernel'])[:100]} grid {exp.loc[i, 'grid']} block {exp.loc[i, 'block']} "
            f"({exp.loc[i, 'stage']} step {exp.loc[i, 'step']}); {len(bad)} results differ"
        )
    for col in JOINED + [c for c in ("unit", "role") if c in exp.columns]:
        res[col] = exp[col].to_numpy()
    res["capture"] = capture
    return res


def _stage_of(stack, domain: str) -> tuple[str, str, int] | None:
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

    Each result's stage and step come from the NVTX stack ncu recorded (the stages' domain, or nsightflow's
    probe domain for a capture of the probe pass); inside a step the results are an ordered subsequence of
    the step's launches, matched greedily on name key, grid and block.
    """
    res = results.sort_values("ncu_id").reset_index(drop=True)
    where = [_stage_of(s, domain) for s in res["nvtx_stack"]]
    if any(w is None for w in where):
        i = next(i for i, w in enumerate(where) if w is None)
        raise MatchError(
            f"{capture}: result {int(res.loc[i, 'ncu_id'])} has no NVTX range of domain {domain!r} on its "
            "stack: capture with --nvtx, and launch the work inside the stages' ranges (results of "
            "autograd's thread carry no stage range; such captures need nsightflow's plan)"
        )
    res["_pass"], res["_stage"], res["_step"] = zip(*where, strict=True)
    rows: list[dict] = []
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
        keys = [(name_key(k), g, b) for k, g, b in zip(cand["kernel"], cand["grid"], cand["block"], strict=True)]
        j = 0
        for i, r in group.iterrows():
            want = (name_key(r["ncu_kernel"]), str(r["grid"]), str(r["block"]))
            while j < len(keys) and keys[j] != want:
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
    out["capture"] = capture
    return out
