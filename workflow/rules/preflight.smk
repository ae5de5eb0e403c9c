rule preflight:
    output:
        "results/preflight/{device}.json",
    params:
        versions=TOOL_VERSIONS,
        nsys=config["tools"]["nsys"],
        ncu=config["tools"]["ncu"],
        python=config["tools"]["python"],
    log:
        "results/preflight/{device}.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=1,
    script:
        "../scripts/preflight.py"
