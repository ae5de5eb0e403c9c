"""Rule torch_profile: the workload under torch.profiler → Chrome trace; analytic count and ceilings in the same
launch; the run's manifest."""

from pathlib import Path

from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.capture.launch.program import program
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    program(dict(sm.params.harness)).torch_profile(
        Path(sm.output.trace),
        ProfileOutputs.of(sm.output.manifest, sm.output.flops, sm.output.ceilings, sm.log[0]),
        RunSettings(dict(sm.params.versions), dict(sm.params.settings), sm.params.timeout_s),
    )
