"""Rule analytic_flops: FlopCounterMode counts per stage (the workload run once, no profiler)."""
from nsightflow.capture import run_tool

sm = snakemake  # noqa: F821
run_tool(list(sm.params.program) + ["--mode", "flops", "--out", sm.output[0]], sm.log[0], sm.params.timeout_s, gpu=True)
