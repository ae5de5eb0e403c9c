"""Rule range_plan: one whole-step window per sampled step, for a range-replay capture."""

from nsightflow.capture.read.plan import range_plan
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    plan = range_plan(sm.input[0], sm.params.domain, list(sm.params.sample_steps), sm.output[0])
    with open(sm.log[0], "w") as log:
        log.write("".join(f"window {w.stage} step {w.step}\n" for w in plan.windows))
