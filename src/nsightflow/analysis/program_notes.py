"""What the run page says about a program run as it is (a command): the steps set apart from its steady state
(warm-up, outside the workload's window), how its analytic count was made, where its stages came from."""

from __future__ import annotations

from typing import Any

from nsightflow import units
from nsightflow.capture.read.warmup import OUTSIDE
from nsightflow.domains import AUTO_DOMAIN
from nsightflow.records import Diagnostic, Manifest


def _spans(steps: list[int]) -> str:
    """Step ordinals as runs: [0, 1, 2, 5] -> 'steps 0 to 2, 5'."""
    runs: list[list[int]] = []
    for i in sorted(steps):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return "steps " + ", ".join(f"{a} to {b}" if b > a else f"{a}" for a, b in runs)


def program_notes(manifest: Manifest | None) -> list[Diagnostic]:
    """A program run as it is: its warm-up steps set apart (per stage, each step's wall and why), and how its
    analytic count was made."""
    if manifest is None:
        return []
    out = []
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for w in manifest.warmup_steps:
        by_stage.setdefault(str(w["stage"]), []).append(w)
    for stage, steps in by_stage.items():
        left = len((manifest.program_wall_s or {}).get(stage, []))
        outside = [int(w["step"]) for w in steps if str(w["why"]).startswith(OUTSIDE)]
        warm = [w for w in steps if not str(w["why"]).startswith(OUTSIDE)]
        said = "; ".join(f"step {w['step']} {units.ms(float(w['wall_s']) * 1e3)} ms ({w['why']})" for w in warm)
        parts = [f"{len(warm)} warm-up step(s) set apart from the steady state: {said}"] if warm else []
        if outside:
            parts.append(f"{len(outside)} step(s) outside the workload's window ({_spans(outside)})")
        out.append(
            Diagnostic(
                "note",
                stage,
                f"{'. '.join(parts)}. They ran in every launch but were not profiled, counted or sampled; wall, MFU "
                f"and throughput are those of the {left} steady step(s)",
            )
        )
    for stage, why in manifest.step_inputs_errors.items():
        out.append(
            Diagnostic(
                "warning",
                stage,
                f"its step_inputs function could not summarise every step (their batch mix is '?' in steps.csv): {why}",
            )
        )
    if manifest.analytic_how:
        out.append(Diagnostic("info", "analytic FLOPs", manifest.analytic_how))
    if manifest.stage_domain == AUTO_DOMAIN:
        out.append(Diagnostic("info", "stages", manifest.stage_domain_how))
    return out
