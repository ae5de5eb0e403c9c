"""Rule torch_profile: the workload under torch.profiler → Chrome trace, and the run's manifest."""
from nsightflow.capture import torch_profile

sm = snakemake  # noqa: F821
torch_profile(list(sm.params.program), sm.output.trace, sm.output.manifest, sm.log[0], dict(sm.params.versions),
              dict(sm.params.settings), sm.params.timeout_s)
