"""Rule import_captures: recognise a directory of captures by content and normalise it."""

import json

from nsightflow.capture.launch.imported import import_captures
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    index = import_captures(sm.params.directory, sm.output[0], sm.params.nsys, sm.params.ncu, sm.log[0])
    with open(sm.log[0], "a") as log:
        log.write(json.dumps(index.to_dict(), indent=2) + "\n")
