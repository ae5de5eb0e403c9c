"""Rule aggregate_captures: tables of captures made elsewhere, and a manifest naming what was analysed."""

import json
from pathlib import Path

from nsightflow.analysis.captures import aggregate_captures
from nsightflow.analysis.diagnostics import diagnose
from nsightflow.analysis.focus import Focus
from nsightflow.analysis.runfiles import RunFiles, write_run
from nsightflow.records import Manifest
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    agg = aggregate_captures(sm.input.imported, Focus.from_params(sm.params.focus), sm.params.domain)
    write_run(agg, RunFiles.of(sm.output), [], diagnose(agg, []))
    index = json.loads((Path(sm.input.imported) / "index.json").read_text())
    Manifest(precision=agg.peaks.precision, captures=index).write(sm.output.manifest)
    with open(sm.log[0], "w") as log:
        log.write(agg.stages.to_string() + "\n" + "\n".join(n.text for n in agg.notes) + "\n")
