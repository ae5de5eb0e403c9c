"""Rule check: every run against its baseline; the verdict in results/check.txt, or the workflow fails with it."""

from nsightflow import files
from nsightflow.analysis.regression import Thresholds, check_runs
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    text = check_runs(sm.params.pairs, Thresholds.of(sm.params.thresholds), str(sm.params.thresholds["baseline"]))
    files.write_text(sm.output[0], text)
    with open(sm.log[0], "w") as log:
        log.write(text)
