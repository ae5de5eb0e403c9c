rule preflight:
    output:
        "results/preflight/{device}.json",
    log:
        "results/preflight/{device}.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=GPU_JOBS,
        runtime=runtime_min(300),
        mem_mb=MEM_MB["light"],
    params:
        versions=TOOL_VERSIONS,
        nsys=config["tools"]["nsys"],
        ncu=config["tools"]["ncu"],
        python=config["tools"]["python"],
    script:
        "../scripts/preflight.py"
