"""Rules preflight and counters: the host's checks (GPU, driver, nsys, ncu) before the timeline, counter access before
any ncu capture; each once per host."""

import json
from dataclasses import asdict

from nsightflow.capture.launch.preflight import PreflightError, counter_preflight, preflight
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    with open(sm.log[0], "w") as log:
        try:
            if sm.rule == "counters":
                checks = counter_preflight(sm.params.ncu, sm.output[0], sm.params.python)
            else:
                checks = preflight(sm.params.nsys, sm.params.ncu, sm.output[0], sm.wildcards.device)
        except PreflightError as exc:
            log.write(str(exc) + "\n")
            raise
        log.write(json.dumps([asdict(c) for c in checks.checks], indent=2) + "\n")
