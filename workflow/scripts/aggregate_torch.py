"""Rule aggregate_torch: kernel/operator and stage tables of one run from its torch.profiler trace."""

from nsightflow.analysis import torchprof
from nsightflow.analysis.diagnostics import diagnose
from nsightflow.analysis.focus import Focus
from nsightflow.analysis.runfiles import RunFiles, write_run
from nsightflow.analysis.torch_backend import aggregate_torch
from nsightflow.records import Manifest
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    trace = torchprof.load_trace(sm.input.trace)
    manifest = Manifest.read(sm.input.manifest)
    labels = manifest.trace_labels
    agg = aggregate_torch(
        torchprof.kernel_table(trace, labels),
        torchprof.stage_table(trace, labels),
        sm.input.flops,
        sm.input.ceilings,
        manifest.precision,
        Focus.from_params(sm.params.focus),
        torchprof.device_kind(trace),
        manifest_json=sm.input.manifest,
        expert_ns=torchprof.expert_time(trace, labels),
    )
    write_run(agg, RunFiles.of(sm.output), [], diagnose(agg, [], manifest))
    with open(sm.log[0], "w") as log:
        log.write(agg.stages.to_string() + "\n" + "\n".join(n.text for n in agg.notes) + "\n")
