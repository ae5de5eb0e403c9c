"""Rule report: results/report.html comparing every run (sweep point), with links to the run pages."""

from nsightflow.analysis.runfiles import read_table
from nsightflow.records import Summary
from nsightflow.report.pages import render_index, write_html
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    runs = [
        {"run_id": r, "name": n, "point": p, "stages": read_table(st), "notes": Summary.read(su).notes()}
        for r, n, p, st, su in zip(
            sm.params.runs, sm.params.names, sm.params.points, sm.input.stages, sm.input.summaries, strict=True
        )
    ]
    write_html(sm.output[0], render_index(runs, sm.params.backend, sm.params.backend_reason, sm.params.title))
    with open(sm.log[0], "w") as log:
        log.write(f"report of {len(runs)} runs, backend {sm.params.backend}\n")
