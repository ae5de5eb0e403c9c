# A regression gate for CI: this config's runs against a baseline (README: "A regression gate").
localrules:
    check,
    save_baseline,


rule check:
    input:
        check_inputs,
    output:
        "results/check.txt",
    log:
        "results/logs/check.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        pairs=lambda wildcards: check_pairs(),
        thresholds=config["check"],
    script:
        "../scripts/check.py"


rule save_baseline:
    input:
        expand("results/{run}/{name}", run=RUNS, name=["stages.csv", "kernels.csv", "manifest.json", "summary.json"]),
    output:
        directory("baselines/{baseline}"),
    log:
        "results/logs/save_baseline.{baseline}.log",
    conda:
        "../../envs/nsightflow.yaml"
    params:
        runs={run: f"results/{run}" for run in RUNS},
    script:
        "../scripts/save_baseline.py"
