rule ceilings:
    output:
        "results/ceilings/{device}/{dtype}.json",
    params:
        versions=TOOL_VERSIONS,
        python=config["tools"]["python"],
    log:
        "results/ceilings/{device}/{dtype}.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=1,
    script:
        "../scripts/ceilings.py"
