"""Rule deep_plan: the capture plan cut down to the windows of each stage's top kernel classes."""

from nsightflow.capture.read.deep import deep_plan
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    plan = deep_plan(sm.input.plan, sm.input.sqlite, sm.params.domain, sm.params.top, sm.output[0])
    with open(sm.log[0], "w") as log:
        log.write(f"deep dive: {len(plan.expected)} launches in {len(plan.windows)} windows\n")
