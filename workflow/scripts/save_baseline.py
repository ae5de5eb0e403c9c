"""Rule save_baseline: every run's tables and records copied to baselines/<name>/<run id>/ (a named baseline)."""

from nsightflow.analysis.regression import save_baseline
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    save_baseline(sm.params.runs, sm.output[0])
    with open(sm.log[0], "w") as log:
        log.write(f"saved {len(sm.params.runs)} run(s) to {sm.output[0]}\n")
