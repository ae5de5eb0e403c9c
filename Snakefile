# nsightflow: profile PyTorch workloads and report measured FLOPs, MFU, bandwidth and rooflines.
# Run: snakemake --cores 1 results/report.html
from snakemake.utils import min_version

min_version("8.20")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# One backend per invocation (see config `profiler` and `captures`); each produces
# results/<run>/{kernels.csv,stages.csv,summary.json,manifest.json} for the shared report.
if BACKEND == "nsight":

    include: "workflow/rules/preflight.smk"
    include: "workflow/rules/timeline.smk"
    include: "workflow/rules/ncu.smk"
    include: "workflow/rules/capture.smk"
    include: "workflow/rules/aggregate.smk"

elif BACKEND == "torch":

    include: "workflow/rules/torch.smk"

else:

    include: "workflow/rules/captures.smk"


include: "workflow/rules/report.smk"
include: "workflow/rules/check.smk"


onstart:
    print(f"nsightflow: backend {BACKEND} ({BACKEND_REASON}); {len(RUNS)} run(s): {', '.join(RUNS)}")


rule all:
    default_target: True
    input:
        "results/report.html",
