"""Rules ncu_capture, ncu_ranges, ncu_deep: one Nsight Compute run of the whole program, windowed by its plan,
exported. ncu_capture makes its plan from the timeline while ncu starts the program; the others are given theirs."""

from nsightflow.capture.launch.ncu_capture import CaptureFiles, PlanSource, ncu_capture
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.capture.launch.program import ncu_launches
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    to, source = CaptureFiles.of(sm.output, sm.input, sm.log[0]), PlanSource.of(sm.input, sm.output, sm.params)
    programs = ncu_launches(dict(sm.params.harness), to.plan, sm.input.manifest, source.made)
    ncu_capture(NcuSettings.from_params(sm.params.ncu), to, source, programs)
