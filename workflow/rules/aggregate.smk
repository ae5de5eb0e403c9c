# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    aggregate,


rule aggregate:
    input:
        unpack(range_inputs),
        sqlite="results/{run}/timeline/timeline.sqlite",
        plan="results/{run}/plan.json",
        export="results/{run}/ncu/capture.raw.csv",
        cmd="results/{run}/ncu/capture.cmd.json",
        flops="results/{run}/analytic_flops.json",
        ceilings="results/{run}/ceilings.json",
        manifest="results/{run}/manifest.json",
    output:
        kernels="results/{run}/kernels.csv",
        stages="results/{run}/stages.csv",
        ranks="results/{run}/ranks.csv",
        experts="results/{run}/experts.csv",
        steps="results/{run}/steps.csv",
        summary="results/{run}/summary.json",
    log:
        "results/{run}/logs/aggregate.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        domain=config["nvtx_domain"],
        focus=focus(),
        ncu=config["tools"]["ncu"],
    script:
        "../scripts/aggregate.py"
