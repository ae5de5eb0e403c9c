"""Rule plan: attribute the timeline by time window and plan the run's one ncu capture."""

from nsightflow.capture.plan import make_plan
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    make_plan(sm.input.sqlite, sm.params.domain, list(sm.params.sample_steps), sm.params.mode, sm.output[0], sm.log[0])
