rule timeline:
    input:
        preflight=f"results/preflight/{DEVICE}.json",
    output:
        rep="results/{run}/timeline/timeline.nsys-rep",
        manifest="results/{run}/manifest.json",
    params:
        versions=TOOL_VERSIONS,
        settings=capture_settings,
        program=program,
        nsys=config["tools"]["nsys"],
        timeout_s=config["nsys"]["timeout_s"],
    log:
        "results/{run}/logs/timeline.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=1,
    script:
        "../scripts/timeline.py"


rule nsys_stats:
    input:
        rep="results/{run}/timeline/timeline.nsys-rep",
    output:
        stats=directory("results/{run}/timeline/stats"),
        sqlite="results/{run}/timeline/timeline.sqlite",
    params:
        versions=TOOL_VERSIONS,
        nsys=config["tools"]["nsys"],
    log:
        "results/{run}/logs/nsys_stats.log",
    conda:
        "../../envs/nsightflow.yaml"
    script:
        "../scripts/nsys_stats.py"
