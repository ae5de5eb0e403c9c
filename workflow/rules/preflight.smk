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
        gpu=GPU_JOBS,
        runtime=runtime_min(300),
        mem_mb=MEM_MB["light"],
    script:
        "../scripts/preflight.py"
