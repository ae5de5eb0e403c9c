"""Rule timeline: nsys profile of the workload, and the run's manifest (versions, device)."""
import json
from pathlib import Path

from nsightflow import nsys
from nsightflow.aggregate import tool_version
from nsightflow.capture import timeline

sm = snakemake  # noqa: F821
out = Path(sm.output.manifest)
program = list(sm.params.program) + ["--out", str(out.with_suffix(".harness.json"))]
timeline(sm.params.nsys, program, sm.output.rep, sm.log[0], sm.params.timeout_s)
harness = json.loads(out.with_suffix(".harness.json").read_text())
harness["versions"] = {"nsys": tool_version(sm.params.nsys), "ncu": tool_version(sm.params.ncu),
                       **{k: harness["environment"].get(k) for k in ("torch", "cuda", "python", "device_name")}}
harness["nsys_argv"] = nsys.profile_argv(sm.params.nsys, Path(sm.output.rep).with_suffix(""), program)
out.write_text(json.dumps(harness, indent=2))
