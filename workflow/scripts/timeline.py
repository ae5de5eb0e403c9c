"""Rule timeline: nsys profile of the workload, and the run's manifest (versions, device, commands)."""
from pathlib import Path

from nsightflow import nsys
from nsightflow.aggregate import tool_version
from nsightflow.capture import timeline, write_manifest

sm = snakemake  # noqa: F821
harness_json = Path(sm.output.manifest + ".harness.json")
program = list(sm.params.program) + ["--out", str(harness_json)]
timeline(sm.params.nsys, program, sm.output.rep, sm.log[0], sm.params.timeout_s)
write_manifest(harness_json, sm.output.manifest,
               {"nsys": tool_version(sm.params.nsys), "ncu": tool_version(sm.params.ncu)},
               [{"what": "Timeline (nsys)",
                 "argv": nsys.profile_argv(sm.params.nsys, Path(sm.output.rep).with_suffix(""), program)}])
harness_json.unlink()
