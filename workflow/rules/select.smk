checkpoint select_kernels:
    input:
        stats="results/{run}/timeline/stats",
        sqlite="results/{run}/timeline/timeline.sqlite",
    output:
        selected="results/{run}/selected_kernels.csv",
        plans=directory("results/{run}/plans"),
    params:
        top_n=config["select"]["top_n"],
        coverage=config["select"]["coverage"],
        sample_steps=config["ncu"]["sample_steps"],
        kernel_filter=config["ncu"]["kernel_filter"],
    log:
        "results/{run}/logs/select.log",
    conda:
        "../../envs/nsightflow.yaml"
    script:
        "../scripts/select_kernels.py"
