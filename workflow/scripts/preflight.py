"""Rule preflight: GPU, driver, nsys, ncu and counter access, checked once per host before any capture."""

import json

from nsightflow.capture.preflight import PreflightError, preflight
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    with open(sm.log[0], "w") as log:
        try:
            checks = preflight(sm.params.nsys, sm.params.ncu, sm.output[0], sm.params.python, sm.wildcards.device)
        except PreflightError as exc:
            log.write(str(exc) + "\n")
            raise
        log.write(json.dumps(checks, indent=2) + "\n")
