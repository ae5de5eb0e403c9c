"""Rule aggregate: per-kernel and per-stage tables of one run."""

from nsightflow.analysis.diagnostics import command_records, diagnose
from nsightflow.analysis.focus import Focus
from nsightflow.analysis.nsight import NsightInputs, aggregate_run
from nsightflow.analysis.runfiles import RunFiles, write_run
from nsightflow.records import CaptureRecord, Manifest
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    manifest = Manifest.read(sm.input.manifest)
    ranges = sm.input.get("ranges")
    records = [CaptureRecord.read(c) for c in [sm.input.cmd] + ([sm.input.ranges_cmd] if ranges else [])]
    agg = aggregate_run(
        NsightInputs.of(sm.input),
        sm.params.domain,
        manifest.precision,
        Focus.from_params(sm.params.focus),
        capture_record=records[0],
    )
    write_run(
        agg,
        RunFiles.of(sm.output),
        command_records(records, sm.params.ncu),
        diagnose(agg, records, manifest),
    )
    with open(sm.log[0], "w") as log:
        log.write(agg.stages.to_string() + "\n" + "\n".join(n.text for n in agg.notes) + "\n")
