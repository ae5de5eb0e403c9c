# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
# import_captures is not one of them: exporting .nsys-rep/.ncu-rep files needs Nsight, which a cluster
# installs on its compute nodes; it asks for no GPU.
localrules:
    aggregate_captures,


rule import_captures:
    input:
        captures_files,
    output:
        directory("results/{run}/imported"),
    log:
        "results/{run}/logs/import_captures.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        runtime=runtime_min(config["nsys"]["timeout_s"]),
        mem_mb=MEM_MB["analysis"],
    params:
        directory=config["captures"],
        nsys=config["tools"]["nsys"],
        ncu=config["tools"]["ncu"],
    script:
        "../scripts/import_captures.py"


rule aggregate_captures:
    input:
        imported="results/{run}/imported",
    output:
        kernels="results/{run}/kernels.csv",
        stages="results/{run}/stages.csv",
        ranks="results/{run}/ranks.csv",
        experts="results/{run}/experts.csv",
        steps="results/{run}/steps.csv",
        summary="results/{run}/summary.json",
        manifest="results/{run}/manifest.json",
    log:
        "results/{run}/logs/aggregate.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        focus=focus(),
        domain=config["nvtx_domain"],
    script:
        "../scripts/aggregate_captures.py"
