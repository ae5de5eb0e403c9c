"""Rule timeline: nsys profile of the workload (with its SQLite export), the wall times, the analytic FLOP count and
the measured ceilings from the same program launch, and the run's manifest."""

from nsightflow.capture.launch.command import profile_timeline
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    profile_timeline(
        sm.params.nsys,
        dict(sm.params.harness),
        sm.output.rep,
        sm.output.sqlite,
        sm.output.manifest,
        sm.output.flops,
        sm.output.ceilings,
        sm.log[0],
        dict(sm.params.versions),
        dict(sm.params.settings),
        sm.params.timeout_s,
    )
