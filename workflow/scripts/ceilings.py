"""Rule ceilings: achievable matmul rate and copy bandwidth of this device, for one dtype."""
import sys

from nsightflow.capture import run_tool

sm = snakemake  # noqa: F821
run_tool([sm.params.python or sys.executable, "-m", "nsightflow.ceilings", "--dtype", sm.wildcards.dtype,
          "--out", sm.output[0]], sm.log[0], sm.params.timeout_s, gpu=True)
