rule ceilings:
    output:
        "results/ceilings/{device}/{dtype}.json",
    params:
        versions=TOOL_VERSIONS,
        python=config["tools"]["python"],
        timeout_s=config["torch"]["timeout_s"],
    log:
        "results/ceilings/{device}/{dtype}.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=1,
    script:
        "../scripts/ceilings.py"
