# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    range_plan,
    deep_plan,
    cards,


# The plan (one launch per class, the windows: nsightflow.capture.read.plan) is made in the capture's own job, from the
# timeline, while ncu starts the program: every change to it reruns the capture anyway, and a job of its own cost about
# 1 s of interpreter and imports on the GPU host.
rule ncu_capture:
    input:
        sqlite="results/{run}/timeline/timeline.sqlite",
        flops="results/{run}/analytic_flops.json",
        manifest="results/{run}/manifest.json",
        preflight=f"results/preflight/{DEVICE}.json",
        counters=f"results/preflight/counters/{DEVICE}.json",
    output:
        plan="results/{run}/plan.json",
        rep="results/{run}/ncu/capture.ncu-rep",
        csv="results/{run}/ncu/capture.raw.csv",
        cmd="results/{run}/ncu/capture.cmd.json",
    log:
        "results/{run}/logs/ncu_capture.log",
    benchmark:
        "results/{run}/benchmarks/ncu_capture.tsv"
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=gpu_jobs,
        runtime=runtime_min(config["ncu"]["timeout_s"]),
        mem_mb=MEM_MB["profile"],
    params:
        versions=TOOL_VERSIONS,
        harness=harness_call,
        domain=config["nvtx_domain"],
        sample_steps=config["ncu"]["sample_steps"],
        mode=config["ncu"]["capture"],
        ncu=ncu_settings(),
    script:
        "../scripts/ncu_capture.py"


rule range_plan:
    input:
        sqlite="results/{run}/timeline/timeline.sqlite",
    output:
        "results/{run}/ranges.plan.json",
    log:
        "results/{run}/logs/range_plan.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        domain=config["nvtx_domain"],
        sample_steps=config["ncu"]["sample_steps"],
    script:
        "../scripts/range_plan.py"


use rule ncu_capture as ncu_ranges with:
    input:
        plan="results/{run}/ranges.plan.json",
        flops="results/{run}/analytic_flops.json",
        manifest="results/{run}/manifest.json",
        preflight=f"results/preflight/{DEVICE}.json",
        counters=f"results/preflight/counters/{DEVICE}.json",
    output:
        rep="results/{run}/ncu/ranges.ncu-rep",
        csv="results/{run}/ncu/ranges.raw.csv",
        cmd="results/{run}/ncu/ranges.cmd.json",
    log:
        "results/{run}/logs/ncu_ranges.log",
    benchmark:
        "results/{run}/benchmarks/ncu_ranges.tsv"
    params:
        versions=TOOL_VERSIONS,
        harness=harness_call,
        # a range's result sums many kernels of any precision; range replay refuses SASS counts
        ncu=ncu_settings(
            tensor_precisions="all",
            non_tensor_flops=False,
            sections=[],
            replay_mode=config["ncu"]["ranges"],
            ranges=True,
        ),


rule deep_plan:
    input:
        plan="results/{run}/plan.json",
        sqlite="results/{run}/timeline/timeline.sqlite",
    output:
        "results/{run}/deep.plan.json",
    log:
        "results/{run}/logs/deep_plan.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        domain=config["nvtx_domain"],
        top=config["ncu"]["deep_dive"],
    script:
        "../scripts/deep_plan.py"


use rule ncu_capture as ncu_deep with:
    input:
        plan="results/{run}/deep.plan.json",
        flops="results/{run}/analytic_flops.json",
        manifest="results/{run}/manifest.json",
        preflight=f"results/preflight/{DEVICE}.json",
        counters=f"results/preflight/counters/{DEVICE}.json",
    output:
        rep="results/{run}/ncu/deep.ncu-rep",
        csv="results/{run}/ncu/deep.raw.csv",
        cmd="results/{run}/ncu/deep.cmd.json",
        details="results/{run}/ncu/deep.details.txt",
    log:
        "results/{run}/logs/ncu_deep.log",
    benchmark:
        "results/{run}/benchmarks/ncu_deep.tsv"
    params:
        versions=TOOL_VERSIONS,
        harness=harness_call,
        # the sections bring their own metrics
        ncu=ncu_settings(
            metrics=["gpu__time_duration.sum"],
            extra_metrics=[],
            tensor_precisions="all",
            non_tensor_flops=False,
            sections=config["ncu"]["deep_sections"],
            replay_mode="kernel",
        ),


rule cards:
    input:
        csv="results/{run}/ncu/deep.raw.csv",
        plan="results/{run}/deep.plan.json",
        details="results/{run}/ncu/deep.details.txt",
    output:
        "results/{run}/cards.json",
    log:
        "results/{run}/logs/cards.log",
    conda:
        "../../envs/nsightflow.yaml"
    script:
        "../scripts/cards.py"
