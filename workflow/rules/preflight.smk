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
    script:
        "../scripts/preflight.py"


# Only ncu's captures need counter access: the check runs beside the timeline (threads 0: with --cores 1 it does not
# wait for the timeline's core; it spends ncu's start, about 2-3 s, waiting on a one-kernel probe). On a cluster it
# asks for one CPU (sbatch refuses --cpus-per-task=0).
rule counters:
    output:
        "results/preflight/counters/{device}.json",
    log:
        "results/preflight/counters/{device}.log",
    conda:
        "../../envs/nsightflow.yaml"
    threads: 0
    resources:
        gpu=GPU_JOBS,
        cpus_per_task=1,
        runtime=runtime_min(300),
        mem_mb=MEM_MB["light"],
    params:
        versions=TOOL_VERSIONS,
        ncu=config["tools"]["ncu"],
        python=config["tools"]["python"],
    script:
        "../scripts/preflight.py"
