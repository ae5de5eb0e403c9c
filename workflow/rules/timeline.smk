# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    plan,


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


rule plan:
    input:
        sqlite="results/{run}/timeline/timeline.sqlite",
    output:
        "results/{run}/plan.json",
    log:
        "results/{run}/logs/plan.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        domain=config["nvtx_domain"],
        sample_steps=config["ncu"]["sample_steps"],
        mode=config["ncu"]["capture"],
    script:
        "../scripts/plan.py"
