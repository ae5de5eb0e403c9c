"""Rule nsys_stats: nsys stats CSVs and the SQLite export of the timeline."""
from nsightflow.capture import stats

sm = snakemake  # noqa: F821
stats(sm.params.nsys, sm.input.rep, sm.output.stats, sm.output.sqlite, sm.log[0])
