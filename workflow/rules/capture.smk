# Config ncu.start 'with_timeline': a command's timeline and ncu capture as one job, ncu's launch of the program started
# with the timeline's so that its start-up is off the job's path (nsightflow.capture.launch.together). The runs it
# takes are the commands' (a callable's ncu launch cannot wait for its timeline): theirs keep rules timeline and
# ncu_capture. A change to ncu's settings reruns a command's timeline too.
ruleorder: capture > timeline
ruleorder: capture > ncu_capture


rule capture:
    input:
        preflight=f"results/preflight/{DEVICE}.json",
        counters=f"results/preflight/counters/{DEVICE}.json",
    output:
        rep="results/{run}/timeline/timeline.nsys-rep",
        sqlite="results/{run}/timeline/timeline.sqlite",
        manifest="results/{run}/manifest.json",
        flops="results/{run}/analytic_flops.json",
        ceilings="results/{run}/ceilings.json",
        plan="results/{run}/plan.json",
        ncu_rep="results/{run}/ncu/capture.ncu-rep",
        csv="results/{run}/ncu/capture.raw.csv",
        cmd="results/{run}/ncu/capture.cmd.json",
    log:
        timeline="results/{run}/logs/timeline.log",
        ncu="results/{run}/logs/ncu_capture.log",
    benchmark:
        "results/{run}/benchmarks/capture.tsv"
    wildcard_constraints:
        run=STARTS_WITH_TIMELINE,
    conda:
        "../../envs/nsightflow.yaml"
    threads: profile_threads
    resources:
        gpu=gpu_jobs,
        runtime=runtime_min(config["nsys"]["timeout_s"] + config["ncu"]["timeout_s"]),
        mem_mb=MEM_MB["profile"],
    params:
        versions=TOOL_VERSIONS,
        settings=capture_settings,
        harness=harness_call,
        code=workload_code,
        nsys=config["tools"]["nsys"],
        timeout_s=config["nsys"]["timeout_s"],
        domain=config["nvtx_domain"],
        sample_steps=config["ncu"]["sample_steps"],
        mode=config["ncu"]["capture"],
        ncu=ncu_settings(),
    script:
        "../scripts/capture.py"
