"""Rules ncu_capture, ncu_ranges, ncu_deep: one Nsight Compute run of the whole program, windowed by its plan,
exported. ncu_capture makes its plan from the timeline while ncu starts the program; the others are given theirs."""

from nsightflow.capture.launch.ncu_capture import capture_counters, counters_before_plan, ncu_capture, plan_maker
from nsightflow.capture.launch.ncu_settings import NcuSettings
from nsightflow.capture.launch.program import ncu_launches
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    settings = NcuSettings.from_params(sm.params.ncu)
    making = bool(sm.output.get("plan"))
    plan = sm.output.plan if making else sm.input.plan
    counters = (settings.tensor_precisions, settings.non_tensor_flops, sm.input.flops)
    ncu_capture(
        settings,
        plan,
        ncu_launches(dict(sm.params.harness), plan, sm.input.manifest, making),
        sm.output.rep,
        sm.output.csv,
        sm.output.cmd,
        sm.log[0],
        counters=counters_before_plan(*counters) if making else capture_counters(*counters, plan),
        details_out=sm.output.get("details"),
        make_plan=plan_maker(
            sm.input.sqlite, sm.params.domain, list(sm.params.sample_steps), sm.params.mode, sm.log[0], *counters
        )
        if making
        else None,
    )
