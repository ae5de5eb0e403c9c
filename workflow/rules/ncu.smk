rule ncu_capture:
    input:
        plan="results/{run}/plans/{capture}.json",
        stats="results/{run}/timeline/stats",
        preflight=f"results/preflight/{DEVICE}.json",
    output:
        rep="results/{run}/ncu/{capture}.ncu-rep",
        cmd="results/{run}/ncu/{capture}.cmd.json",
    params:
        versions=TOOL_VERSIONS,
        program=program,
        ncu=config["tools"]["ncu"],
        metrics=ncu_metrics(),
        sections=config["ncu"]["sections"],
        replay_mode=config["ncu"]["replay_mode"],
        fallback=config["ncu"]["fallback"],
        clock_control=config["ncu"]["clock_control"],
        cache_control=config["ncu"]["cache_control"],
        timeout_s=config["ncu"]["timeout_s"],
    log:
        "results/{run}/logs/ncu_{capture}.log",
    conda:
        "../../envs/nsightflow.yaml"
    resources:
        gpu=1,
    script:
        "../scripts/ncu_capture.py"


rule ncu_export:
    input:
        rep="results/{run}/ncu/{capture}.ncu-rep",
    output:
        csv="results/{run}/ncu/{capture}.raw.csv",
    params:
        versions=TOOL_VERSIONS,
        ncu=config["tools"]["ncu"],
    log:
        "results/{run}/logs/ncu_export_{capture}.log",
    conda:
        "../../envs/nsightflow.yaml"
    script:
        "../scripts/ncu_export.py"
