"""Rule aggregate_torch: kernel/operator and stage tables of one run from its torch.profiler trace."""

import json

from nsightflow import torchprof
from nsightflow.aggregate import aggregate_torch, diagnose
from nsightflow.rulejob import rule_job
from nsightflow.runfiles import write_run

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    trace = torchprof.load_trace(sm.input.trace)
    manifest = json.loads(open(sm.input.manifest).read())
    labels = manifest.get("trace_labels", {})
    agg = aggregate_torch(
        torchprof.kernel_table(trace, labels),
        torchprof.stage_table(trace, labels),
        sm.input.flops,
        sm.input.ceilings,
        manifest["precision"],
        sm.params.top_n,
        sm.params.coverage,
        torchprof.device_kind(trace),
        sm.params.divergence,
        manifest_json=sm.input.manifest,
    )
    write_run(agg, sm.output.kernels, sm.output.stages, sm.output.summary, [], diagnose(agg, [], manifest))
    with open(sm.log[0], "w") as log:
        log.write(agg.stages.to_string() + "\n" + "\n".join(agg.notes) + "\n")
