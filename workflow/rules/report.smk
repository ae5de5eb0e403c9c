# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    report,
    diff,


# Every run's page and the index, in one job (nsightflow.report.site says why).
rule report:
    input:
        kernels=expand("results/{run}/kernels.csv", run=RUNS),
        stages=expand("results/{run}/stages.csv", run=RUNS),
        summaries=expand("results/{run}/summary.json", run=RUNS),
        manifests=expand("results/{run}/manifest.json", run=RUNS),
        cards=all_cards,
    output:
        pages=expand("results/{run}/report.html", run=RUNS),
        index="results/report.html",
    log:
        "results/logs/report.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        runs=list(RUNS),
        names=[RUNS[r]["name"] for r in RUNS],
        points=[RUNS[r]["point"] for r in RUNS],
        settings=[run_settings(r) for r in RUNS],
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
