rule report:
    input:
        kernels=expand("results/{run}/kernels.csv", run=RUNS),
        stages=expand("results/{run}/stages.csv", run=RUNS),
        summaries=expand("results/{run}/summary.json", run=RUNS),
        manifests=expand("results/{run}/manifest.json", run=RUNS),
        cmds=all_cmd_files,
    output:
        "results/report.html",
    params:
        runs=list(RUNS),
        points=[RUNS[r]["point"] for r in RUNS],
        backend=BACKEND,
        backend_reason=BACKEND_REASON,
        config=config,
        ncu=config["tools"]["ncu"],
    log:
        "results/logs/report.log",
    conda:
        "../../envs/nsightflow.yaml"
    script:
        "../scripts/report.py"
