"""Rule report: every run's page and results/report.html comparing the runs (sweep points), in one job."""

from nsightflow.report.site import RunPage, write_report
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    cards = list(sm.input.cards) or [None] * len(sm.params.runs)
    runs = [
        RunPage(*fields)
        for fields in zip(
            sm.params.runs,
            sm.params.names,
            sm.params.points,
            sm.input.kernels,
            sm.input.stages,
            sm.input.summaries,
            sm.input.manifests,
            sm.params.settings,
            sm.output.pages,
            cards,
            strict=True,
        )
    ]
    said = write_report(runs, sm.output.index, sm.params.backend, sm.params.backend_reason, sm.params.title)
    with open(sm.log[0], "w") as log:
        log.write("\n".join(said) + "\n")
