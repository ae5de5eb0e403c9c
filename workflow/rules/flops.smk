rule analytic_flops:
    output:
        "results/{run}/analytic_flops.json",
    params:
        versions=TOOL_VERSIONS,
        program=program,
        timeout_s=config["torch"]["timeout_s"],
    log:
        "results/{run}/logs/analytic_flops.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=1,
    script:
        "../scripts/analytic_flops.py"
