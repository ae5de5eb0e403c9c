"""Rule aggregate: per-kernel and per-stage tables of one run."""
from nsightflow.aggregate import aggregate_run, command_records, write_run

sm = snakemake  # noqa: F821
agg = aggregate_run(sm.input.stats, sm.input.sqlite, sm.input.selected, list(sm.input.plans), list(sm.input.exports),
                    sm.input.flops, sm.params.dtype, sm.params.divergence, ceiling_json=sm.input.ceiling)
write_run(agg, sm.output.kernels, sm.output.stages, sm.output.summary, command_records(list(sm.input.cmds), sm.params.ncu))
with open(sm.log[0], "w") as log:
    log.write(agg["stages"].to_string() + "\n" + "\n".join(agg["notes"]) + "\n")
