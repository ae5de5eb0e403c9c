"""Rule aggregate: per-kernel and per-stage tables of one run."""
import json

from nsightflow.aggregate import aggregate_run, command_records, diagnose, write_run

sm = snakemake  # noqa: F821
agg = aggregate_run(sm.input.stats, sm.input.sqlite, sm.input.selected, list(sm.input.plans), list(sm.input.exports),
                    sm.input.flops, sm.params.dtype, sm.params.divergence, ceiling_json=sm.input.ceiling)
records = [json.loads(open(c).read()) for c in sm.input.cmds]
manifest = json.loads(open(sm.input.manifest).read())
write_run(agg, sm.output.kernels, sm.output.stages, sm.output.summary, command_records(list(sm.input.cmds), sm.params.ncu),
          diagnose(agg, records, manifest))
with open(sm.log[0], "w") as log:
    log.write(agg["stages"].to_string() + "\n" + "\n".join(agg["notes"]) + "\n")
