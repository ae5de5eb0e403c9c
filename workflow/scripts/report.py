"""Rule report: results/report.html from every run's tables."""
from pathlib import Path

from nsightflow.aggregate import load_run
from nsightflow.report import render

sm = snakemake  # noqa: F821
runs = []
for i, run_id in enumerate(sm.params.runs):
    cmds = [c for c in sm.input.cmds if c.startswith(f"results/{run_id}/ncu/")]
    runs.append(load_run(run_id, sm.input.kernels[i], sm.input.stages[i], sm.input.summaries[i],
                         sm.input.manifests[i], cmds, sm.params.config, sm.params.ncu,
                         point=sm.params.points[i], backend=sm.params.backend, backend_reason=sm.params.backend_reason))
tmp = Path(sm.output[0] + ".tmp")
tmp.write_text(render(runs))
tmp.replace(sm.output[0])
Path(sm.log[0]).write_text(f"report of {len(runs)} runs, backend {sm.params.backend}\n")
