# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    run_report,
    report,
    diff,


rule run_report:
    input:
        unpack(card_inputs),
        kernels="results/{run}/kernels.csv",
        stages="results/{run}/stages.csv",
        experts="results/{run}/experts.csv",
        steps="results/{run}/steps.csv",
        summary="results/{run}/summary.json",
        manifest="results/{run}/manifest.json",
    output:
        "results/{run}/report.html",
    log:
        "results/{run}/logs/report.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        backend=BACKEND,
        backend_reason=BACKEND_REASON,
        settings=run_settings,
        title=config["report"]["title"],
    script:
        "../scripts/run_report.py"


rule report:
    input:
        pages=expand("results/{run}/report.html", run=RUNS),
        stages=expand("results/{run}/stages.csv", run=RUNS),
        summaries=expand("results/{run}/summary.json", run=RUNS),
        manifests=expand("results/{run}/manifest.json", run=RUNS),
    output:
        "results/report.html",
    log:
        "results/logs/report.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        runs=list(RUNS),
        names=[RUNS[r]["name"] for r in RUNS],
        points=[RUNS[r]["point"] for r in RUNS],
        backend=BACKEND,
        backend_reason=BACKEND_REASON,
        title=config["report"]["title"],
    script:
        "../scripts/report.py"


rule diff:
    input:
        unpack(diff_inputs),
    output:
        "results/diff.html",
    log:
        "results/logs/diff.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        before=lambda wildcards: config["diff"]["before"],
        after=lambda wildcards: config["diff"]["after"],
        title=config["report"]["title"],
    script:
        "../scripts/diff.py"
