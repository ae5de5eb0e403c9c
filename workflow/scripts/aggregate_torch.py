"""Rule aggregate_torch: kernel/operator and stage tables of one run from its torch.profiler trace."""
from nsightflow import torchprof
from nsightflow.aggregate import aggregate_torch, write_run

sm = snakemake  # noqa: F821
trace = torchprof.load_trace(sm.input.trace)
agg = aggregate_torch(torchprof.kernel_table(trace), torchprof.stage_table(trace), sm.input.flops, sm.input.ceiling,
                      sm.params.dtype, sm.params.top_n, sm.params.coverage, torchprof.device_kind(trace),
                      sm.params.divergence)
write_run(agg, sm.output.kernels, sm.output.stages, sm.output.summary)
with open(sm.log[0], "w") as log:
    log.write(agg["stages"].to_string() + "\n" + "\n".join(agg["notes"]) + "\n")
