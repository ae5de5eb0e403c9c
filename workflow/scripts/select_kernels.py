"""Checkpoint select_kernels: top kernels per stage and one ncu capture plan per run of ncu."""
from nsightflow.capture import selection

sm = snakemake  # noqa: F821
plans = selection(sm.input.stats, sm.input.sqlite, sm.params.top_n, sm.params.coverage,
                  list(sm.params.sample_steps), sm.output.selected, sm.output.plans, sm.params.kernel_filter,
                  sm.params.domain)
with open(sm.log[0], "w") as log:
    for p in plans:
        log.write(f"{p.capture_id}: stage {p.stage} steps {p.steps} skip {p.launch_skip} count {p.launch_count} "
                  f"kernels {len(p.kernels)}\n")
