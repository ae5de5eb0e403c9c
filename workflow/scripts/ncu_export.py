"""Rule ncu_export: raw page of a capture as CSV in base units."""
from nsightflow.capture import ncu_export

sm = snakemake  # noqa: F821
ncu_export(sm.params.ncu, sm.input.rep, sm.output.csv, sm.log[0])
