"""Rule run_report: one run's page (stages, kernels, roofline, peaks, commands)."""

from nsightflow.analysis.cards import read_cards
from nsightflow.analysis.runfiles import load_run
from nsightflow.report.pages import render_run, write_html
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    run = dict(
        load_run(
            sm.wildcards.run,
            sm.input.kernels,
            sm.input.stages,
            sm.input.summary,
            sm.input.manifest,
            sm.input.experts,
            sm.input.steps,
        )
    )
    if sm.input.get("cards"):
        run["cards"] = read_cards(sm.input.cards)
    write_html(
        sm.output[0], render_run(run, sm.params.backend, sm.params.backend_reason, sm.params.settings, sm.params.title)
    )
    with open(sm.log[0], "w") as log:
        log.write(f"run page {sm.wildcards.run}: {len(run['stages'])} stages, {len(run['kernels'])} kernels\n")
