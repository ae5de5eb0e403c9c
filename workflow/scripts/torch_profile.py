"""Rule torch_profile: the workload under torch.profiler → Chrome trace; analytic count and ceilings in the same
launch; the run's manifest."""

from nsightflow.capture.launch.command import profile_torch
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    profile_torch(
        dict(sm.params.harness),
        sm.output.trace,
        sm.output.manifest,
        sm.output.flops,
        sm.output.ceilings,
        sm.log[0],
        dict(sm.params.versions),
        dict(sm.params.settings),
        sm.params.timeout_s,
    )
