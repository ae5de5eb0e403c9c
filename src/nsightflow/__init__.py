"""nsightflow: targeted Nsight Systems / Nsight Compute profiling of PyTorch models.

The package owns parsing, command building, kernel selection, metric math and rendering;
the Snakemake workflow in ``workflow/`` only wires these together as cached file targets.
"""

__version__ = "0.1.0"
