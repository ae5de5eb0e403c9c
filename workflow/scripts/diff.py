"""Rule diff: results/diff.html comparing the two runs config diff names."""

from nsightflow.analysis.runfiles import load_run
from nsightflow.report.diff_page import render_diff
from nsightflow.report.pages import write_html
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    runs = [
        load_run(
            ref, sm.input[f"{s}_kernels"], sm.input[f"{s}_stages"], sm.input[f"{s}_summary"], sm.input[f"{s}_manifest"]
        )
        for s, ref in (("before", sm.params.before), ("after", sm.params.after))
    ]
    write_html(sm.output[0], render_diff(runs[0], runs[1], sm.params.title))
    with open(sm.log[0], "w") as log:
        log.write(f"diff of {sm.params.before} and {sm.params.after}\n")
