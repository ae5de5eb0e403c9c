"""Rule timeline: nsys profile of the workload (with its SQLite export), the analytic FLOP count and the
measured ceilings from the same program launch, and the run's manifest."""

from pathlib import Path

from nsightflow.capture import timeline, tool_warnings, write_manifest
from nsightflow.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    harness_json = Path(sm.output.manifest + ".harness.json")
    program = list(sm.params.program) + [
        "--out",
        str(harness_json),
        "--flops-out",
        sm.output.flops,
        "--ceilings-out",
        sm.output.ceilings,
    ]
    out, argv = timeline(sm.params.nsys, program, sm.output.rep, sm.output.sqlite, sm.log[0], sm.params.timeout_s)
    write_manifest(
        harness_json,
        sm.output.manifest,
        dict(sm.params.versions),
        [{"what": "Timeline (nsys), wall times, analytic count and ceilings in the same launch", "argv": argv}],
        dict(sm.params.settings),
        tool_warnings(out),
    )
    harness_json.unlink()
