"""Rule capture: a command's timeline and ncu capture in one job, ncu's launch started with the timeline's
(config ncu.start 'with_timeline': nsightflow.capture.launch.together)."""

from pathlib import Path

from nsightflow.capture.launch.ncu_inputs import CaptureFiles, PlanSource
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings
from nsightflow.capture.launch.program import program
from nsightflow.capture.launch.together import capture
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log.ncu, sm.output):
    o, p = sm.output, sm.params
    out = ProfileOutputs.of(o.manifest, o.flops, o.ceilings, sm.log.timeline)
    run = RunSettings(dict(p.versions), dict(p.settings), p.timeout_s)
    to = CaptureFiles(Path(o.plan), Path(o.ncu_rep), Path(o.csv), Path(o.cmd), Path(sm.log.ncu))
    source = PlanSource(Path(o.flops), Path(o.sqlite), p.domain, tuple(p.sample_steps), p.mode)
    timeline = (Path(o.rep), Path(o.sqlite), out, run)
    harness = dict(p.harness)
    capture(program(harness), harness.get("dtype"), p.nsys, timeline, NcuSettings.from_params(p.ncu), to, source)
