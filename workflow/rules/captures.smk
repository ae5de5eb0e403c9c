# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    import_captures,
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
        summary="results/{run}/summary.json",
        manifest="results/{run}/manifest.json",
    log:
        "results/{run}/logs/aggregate.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        divergence=config["report"]["divergence"],
        top_n=config["select"]["top_n"],
        coverage=config["select"]["coverage"],
    script:
        "../scripts/aggregate_captures.py"
