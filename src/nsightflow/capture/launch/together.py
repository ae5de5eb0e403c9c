"""Rule capture (config ``ncu.start: with_timeline``): a command's timeline and its ncu capture in one job, ncu's
launch of the program started with the timeline's launches, so that its start-up is off the job's path.

Why: a program's start-up (its interpreter, ``import torch``, its libraries: 10 to 15 s of a 20-to-30-s serving loop
on the GPU host, docs/benchmarks.md) comes three times in a capture, in the timed run, under nsys and under ncu. The
nsys launch already does its start-up beside the timed run (nsightflow.capture.inside.gate); ncu's, in a job of its
own, can start only once the timeline's job has ended (measured: the serving test's capture 10.6 s shorter).

How: ncu starts first, its program held at its first contact with the GPU (or another contact:
nsightflow.capture.inside.gate) until the timeline's programs have ended; beside it, as a plan made beside ncu's start
always is (nsightflow.capture.launch.ncu_capture), the timeline runs as rule timeline runs it (its timed run waits
until ncu's launch is ready too, so that no start-up shares the machine with the timed program). The timeline opens
the gate with the stages its timed run found once the program under nsys has ended, while nsys still exports
(nsightflow.capture.launch.release); ncu's program then starts on the GPU and waits at its first step for the plan,
made from the timeline's export. ncu's FLOP counters are chosen before the probe pass
has run (nsightflow.capture.launch.ncu_inputs.counters_before_timeline): where the plan asks for others, ncu starts
again with them, as in a job of its own. The program under ncu touches the GPU only once no launch of the timeline
runs, so what it runs is what it runs alone (a program that sizes its caches from the free GPU memory sees it all).

The price: both are one job, so a change to ncu's settings reruns the timeline too (config ``ncu.start``'s
``after_timeline`` keeps them apart). A callable's ncu launch cannot wait so (the harness builds the model before
anything could hold it): it keeps the two rules.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from nsightflow import files
from nsightflow.capture.launch.ncu_capture import ncu_capture
from nsightflow.capture.launch.ncu_inputs import CaptureFiles, PlanSource, counters_before_timeline
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.capture.launch.program import Program
from nsightflow.errors import CaptureError, ConfigError


@contextmanager
def _on_devices(env: dict[str, str]) -> Iterator[None]:
    """Within: this process's ``CUDA_VISIBLE_DEVICES`` is that of ``env`` (the devices ncu's launch was given), so
    that the timeline's launches take the same ones (nsightflow.capture.launch.gpus.claim respects it) rather than
    wait for others."""
    given, own = env.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is None or own is not None:
        yield
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = given
    try:
        yield
    finally:
        del os.environ["CUDA_VISIBLE_DEVICES"]


def capture(
    program: Program,
    dtype: str | None,
    nsys_bin: str,
    timeline: tuple[Path, Path, ProfileOutputs, RunSettings],
    settings: NcuSettings,
    to: CaptureFiles,
    source: PlanSource,
) -> None:
    """The timeline (``timeline``: nsys's report, its SQLite export, the files beside them, the run's settings, as
    nsightflow.capture.launch.program.Program.timeline takes them) and ncu's capture of the plan made from it
    (as nsightflow.capture.launch.ncu_capture.ncu_capture), ncu's launch started first (see the module's docstring).
    ``dtype``: the workload's declared one, which ncu's first counters follow."""
    rep, sqlite, out, run = timeline
    if not source.made:
        raise ConfigError("rule capture makes its plan from its own timeline: it takes no plan given")
    with files.scratch(to.plan.parent, "nsightflow-start") as tmp:
        gate = (Path(tmp) / "stages.json").resolve()
        launches = program.ncu_launches_beside(to.plan, gate)
        assert launches, "rule capture runs the programs whose ncu launch can wait for its timeline (common.smk)"

        def timeline_first(env: dict[str, str], pid: int) -> None:
            with _on_devices(env):  # the timeline opens the gate once the GPU is free of it
                program.timeline(nsys_bin, rep, sqlite, out, replace(run, also_gated={str(gate): pid}))
            if not gate.exists():
                raise CaptureError(f"the timeline did not let ncu's launch go ({gate}); log: {out.log}")

        guessed = counters_before_timeline(settings.tensor_precisions, settings.non_tensor_flops, dtype)
        # ncu's launch runs while the timeline does: its limit is both's
        limit = None if settings.timeout_s is None or run.timeout_s is None else settings.timeout_s + run.timeout_s
        ncu_capture(replace(settings, timeout_s=limit), to, source, launches, timeline_first, guessed)
