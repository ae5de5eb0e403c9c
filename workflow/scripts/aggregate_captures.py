"""Rule aggregate_captures: tables of captures made elsewhere, and a manifest naming what was analysed."""

import json
from pathlib import Path

from nsightflow.aggregate import aggregate_captures, diagnose
from nsightflow.rulejob import rule_job
from nsightflow.runfiles import write_run

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    agg = aggregate_captures(
        sm.input.imported, sm.params.divergence, sm.params.top_n, sm.params.coverage, sm.params.domain
    )
    write_run(agg, sm.output.kernels, sm.output.stages, sm.output.summary, [], diagnose(agg, []))
    index = json.loads((Path(sm.input.imported) / "index.json").read_text())
    Path(sm.output.manifest).write_text(json.dumps({"captures": index, "versions": {}, "commands": []}, indent=2))
    with open(sm.log[0], "w") as log:
        log.write(agg.stages.to_string() + "\n" + "\n".join(agg.notes) + "\n")
