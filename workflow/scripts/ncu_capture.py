"""Rules ncu_capture, ncu_ranges: one Nsight Compute run of the whole program, windowed by its plan, exported."""

from nsightflow.capture import ncu_capture
from nsightflow.ncu import resolve_metrics
from nsightflow.rulelog import errors_to_log

sm = snakemake  # noqa: F821
with errors_to_log(sm.log[0]):
    metrics = resolve_metrics(sm.params.metrics, list(sm.params.extra_metrics), ranges=sm.params.ranges)
    ncu_capture(
        sm.params.ncu,
        sm.input.plan,
        list(sm.params.program),
        sm.output.rep,
        sm.output.csv,
        sm.output.cmd,
        sm.log[0],
        metrics=metrics,
        sections=list(sm.params.sections),
        replay_mode=sm.params.replay_mode,
        clock_control=sm.params.clock_control,
        cache_control=sm.params.cache_control,
        timeout_s=sm.params.timeout_s,
        ranges=sm.params.ranges,
    )
