"""Rule ncu_capture: one targeted Nsight Compute run of a capture plan."""
from nsightflow.capture import ncu_capture

sm = snakemake  # noqa: F821
ncu_capture(sm.params.ncu, sm.input.plan, list(sm.params.program), sm.output.rep, sm.output.cmd, sm.log[0],
            metrics=list(sm.params.metrics), sections=list(sm.params.sections), replay_mode=sm.params.replay_mode,
            clock_control=sm.params.clock_control, cache_control=sm.params.cache_control,
            timeout_s=sm.params.timeout_s, stats_dir=sm.input.stats, fallback=sm.params.fallback)
