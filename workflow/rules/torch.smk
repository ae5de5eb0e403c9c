# Light jobs (seconds, under 1 GB) run where snakemake runs, never through a cluster's queue.
localrules:
    aggregate_torch,


rule torch_profile:
    output:
        trace="results/{run}/torch/trace.json",
        manifest="results/{run}/manifest.json",
        flops="results/{run}/analytic_flops.json",
        ceilings="results/{run}/ceilings.json",
    log:
        "results/{run}/logs/torch_profile.log",
    benchmark:
        "results/{run}/benchmarks/torch_profile.tsv"
    conda:
        "../../envs/nsightflow.yaml"
    threads: profile_threads
    resources:
        gpu=gpu_jobs,
        runtime=runtime_min(config["torch"]["timeout_s"]),
        mem_mb=MEM_MB["profile"],
    params:
        versions=TOOL_VERSIONS,
        settings=capture_settings,
        harness=harness_call,
        code=workload_code,
        timeout_s=config["torch"]["timeout_s"],
    script:
        "../scripts/torch_profile.py"


rule aggregate_torch:
    input:
        trace="results/{run}/torch/trace.json",
        flops="results/{run}/analytic_flops.json",
        ceilings="results/{run}/ceilings.json",
        manifest="results/{run}/manifest.json",
    output:
        kernels="results/{run}/kernels.csv",
        stages="results/{run}/stages.csv",
        ranks="results/{run}/ranks.csv",
        experts="results/{run}/experts.csv",
        steps="results/{run}/steps.csv",
        summary="results/{run}/summary.json",
    log:
        "results/{run}/logs/aggregate.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        focus=focus(),
    script:
        "../scripts/aggregate_torch.py"
