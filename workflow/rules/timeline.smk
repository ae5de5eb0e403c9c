rule timeline:
    input:
        preflight=f"results/preflight/{DEVICE}.json",
    output:
        rep="results/{run}/timeline/timeline.nsys-rep",
        sqlite="results/{run}/timeline/timeline.sqlite",
        manifest="results/{run}/manifest.json",
        flops="results/{run}/analytic_flops.json",
        ceilings="results/{run}/ceilings.json",
    log:
        "results/{run}/logs/timeline.log",
    conda:
        "../../envs/nsightflow.yaml"
    threads: profile_threads
    resources:
        gpu=gpu_jobs,
        runtime=runtime_min(config["nsys"]["timeout_s"]),
        mem_mb=MEM_MB["profile"],
    params:
        versions=TOOL_VERSIONS,
        settings=capture_settings,
        harness=harness_call,
        code=workload_code,
        nsys=config["tools"]["nsys"],
        timeout_s=config["nsys"]["timeout_s"],
    script:
        "../scripts/timeline.py"
