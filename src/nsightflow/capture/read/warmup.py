"""Which of a program's own timed steps are warm-up, not its steady state: set apart before anything is measured.

A program run as it is (a command workload) has no warm-up pass of nsightflow's: its first steps compile
(``torch.compile``: tens of seconds), record CUDA graphs, autotune, fill cold caches or initialise lazily, and a stage's
wall averaged over them says nothing of the program's steady state (gpt-fast ``--compile``: decode steps of 38,207 ms,
19 ms, then 0.4 to 0.7 ms). The timed run (nothing collecting) tells them apart, from two kinds of evidence:

- the step compiled: ``torch.compile`` made a graph while the step's range was open (dynamo's own counter);
- the step is one of the stage's *leading* steps and took more than ``FACTOR`` times the steady median (the median of
  the stage's later half of steps).

Only a leading run of steps is set apart (a slow step between steady ones is the program's, not its warm-up), and
never every step: a stage whose only step compiled keeps it, and says so. Where the steps' batch mixes are known (a
serving loop's ``step_inputs``: nsightflow.mixes), each mix is its own sequence: a step is compared with the later
steps of its own mix, and the leading run is that mix's first steps. A prefill of every prompt is no warm-up of the
decode steps after it; a mix with one step has nothing to be compared with, and keeps it. The steps set apart are
followed but not profiled, counted or sampled in every later run of the program (nsightflow.capture.inside.hook); the
report names them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

OUTSIDE = "outside the workload's window"  # why a step outside the window is set apart (Window)
FACTOR = 2.0  # a leading step this many times the steady median is warm-up (a cold first step: 2.3x)


@dataclass(frozen=True)
class WarmupStep:
    """One step set apart: its stage, its index among the stage's steps, its wall time in the timed run, and why."""

    stage: str
    step: int
    wall_s: float
    why: str


def warmup_steps(
    stage: str, walls: list[float], graphs: list[int], first: int | None = None, mixes: list[str] | None = None
) -> list[WarmupStep]:
    """The leading steps of ``stage`` that are warm-up: ``walls`` each step's wall time (s) in the timed run,
    ``graphs`` how many graphs ``torch.compile`` made while each step ran; ``first``: the first N steps instead (the
    workload's ``warmup_steps: N``), never every one. ``mixes``: each step's batch mix (nsightflow.mixes), where the
    steps' inputs were summarised: each mix's steps are judged among themselves."""
    n = len(walls)
    if first is not None:
        said = f"the workload's warmup_steps: {first}"
        return [WarmupStep(stage, i, walls[i], said) for i in range(min(first, n - 1))]
    if mixes is None or len(mixes) != n:
        return _leading(stage, list(range(n)), walls, graphs, "")
    groups: dict[str, list[int]] = {}
    for i, mix in enumerate(mixes):
        groups.setdefault(mix, []).append(i)
    apart = [w for mix, steps in groups.items() for w in _leading(stage, steps, walls, graphs, mix)]
    return sorted(apart, key=lambda w: w.step)


def _leading(stage: str, steps: list[int], walls: list[float], graphs: list[int], mix: str) -> list[WarmupStep]:
    """The warm-up run at the start of ``steps`` (indices into ``walls``, in order; one mix's, or every step)."""
    n = len(steps)
    if n < 2:
        return []
    steady = statistics.median(walls[i] for i in steps[n // 2 :])
    peers = f"the steady median {mix} step" if mix else "the steady median step"
    apart: list[WarmupStep] = []
    for k, i in enumerate(steps[:-1]):  # never the last step: a stage (a mix) keeps at least one
        why = []
        if i < len(graphs) and graphs[i]:
            why.append(f"torch.compile made {graphs[i]} graph(s) in it")
        if k < n // 2 and steady > 0 and walls[i] > FACTOR * steady:
            why.append(f"{walls[i] / steady:.1f}x {peers} ({steady * 1e3:.3g} ms)")
        if not why:
            break
        apart.append(WarmupStep(stage, i, walls[i], "; ".join(why)))
    return apart


def only_step_compiled(walls: list[float], graphs: list[int]) -> bool:
    """A stage of one step, which compiled: it stays (it is the stage), and its wall includes the compilation."""
    return len(walls) == 1 and bool(graphs and graphs[0])


@dataclass(frozen=True)
class Window:
    """The steps a long-running program is profiled in (the workload's ``window:``): its steps ``start`` to
    ``start + steps - 1``, counted from 0 over every stage's steps in the order they ran (one stretch of the run,
    as a server's steps under load); every other step is followed only, as a warm-up step is."""

    start: int
    steps: int

    def __str__(self) -> str:
        return f"the program's steps {self.start} to {self.start + self.steps - 1}"

    def holds(self, ordinal: int) -> bool:
        return self.start <= ordinal < self.start + self.steps


def set_apart(
    stage: str,
    walls: list[float],
    graphs: list[int],
    first: int | None = None,
    inside: list[bool] | None = None,
    mixes: list[str] | None = None,
) -> list[WarmupStep]:
    """The steps of ``stage`` that are not profiled: its warm-up steps (:func:`warmup_steps`, over every step the
    program ran, by batch mix where ``mixes`` are known) and, where a window is given (``inside``: whether each step
    lies in it), every step outside it. The window's steps stay where all of them were warm-up (a stage is never left
    without a step)."""
    apart = {w.step: w for w in warmup_steps(stage, walls, graphs, first, mixes)}
    if inside is None:
        return list(apart.values())
    out = []
    for i, wall in enumerate(walls):
        why = [apart[i].why] if i in apart else []
        if not inside[i]:
            why.insert(0, OUTSIDE)
        if why:
            out.append(WarmupStep(stage, i, wall, "; ".join(why)))
    if len(out) == len(walls):
        out = [w for w in out if not inside[w.step]]
    return out
