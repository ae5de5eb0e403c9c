# nsightflow: nsys timeline -> top-N kernels -> targeted ncu captures -> raw CSV -> MFU/roofline -> report.
# Run: snakemake --cores 1 results/report.html
from snakemake.utils import min_version

min_version("8.20")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/timeline.smk"
include: "workflow/rules/flops.smk"
include: "workflow/rules/select.smk"
include: "workflow/rules/ncu.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        "results/report.html",
    default_target: True
