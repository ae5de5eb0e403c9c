"""Rule timeline: nsys profile of the workload (with its SQLite export), the wall times, the analytic FLOP count and
the measured ceilings from the same program launch, and the run's manifest."""

from pathlib import Path

from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.capture.launch.program import program
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    program(dict(sm.params.harness)).timeline(
        sm.params.nsys,
        Path(sm.output.rep),
        Path(sm.output.sqlite),
        ProfileOutputs.of(sm.output.manifest, sm.output.flops, sm.output.ceilings, sm.log[0]),
        RunSettings(dict(sm.params.versions), dict(sm.params.settings), sm.params.timeout_s),
    )
