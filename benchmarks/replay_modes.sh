#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): what a profiled launch of the serving
# loop costs by ncu's kernel replay (the capture's), by application replay and by kernel replay with the caches left
# as they are, and whether the counters agree. The loop is the serving GPU test's (1B Llama shape, random weights,
# 64 requests; tests/test_serving.py). Steps: the loop alone, then the workflow on it (its plan.json, the jobs'
# seconds); then benchmarks/launch_layers.py with that plan (ncu-plan, ncu-plan-app, ncu-plan-no-flush), the reports
# kept; then each report's counters summed over its results, side by side. Everything lands in $1.
#   bash benchmarks/replay_modes.sh OUTDIR
set -u
out=$(realpath -m "$1"); mkdir -p "$out"
root=$PWD
wf=$(mktemp -d /tmp/replay-wf.XXXX)
argv=$(python3 - <<'EOF'
import json, shlex, sys
sys.path.insert(0, "tests")
from test_serving import SERVE_1B
print(shlex.join(["python3", "-m", "nsightflow.workloads.serving", "--config", json.dumps(SERVE_1B), "--dtype",
                  "bfloat16", "--device", "cuda", "--requests", "64", "--prompt", "256", "--prompt-spread", "192",
                  "--new", "64", "--new-spread", "48"]))
EOF
)
python3 - "$wf" "$argv" <<'EOF'
import shlex, sys
from pathlib import Path
import yaml
sys.path.insert(0, "tests")
from conftest import copy_workflow
from nsightflow.workloads import serving
work = copy_workflow(Path(sys.argv[1]))
cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
workload = {"name": "serve", "command": shlex.split(sys.argv[2]), "warmup_steps": 0,
            "step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
cfg.update(workloads=[workload], profiler="nsight")
(work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
EOF
cd "$wf" || exit 1
eval "$argv" > /dev/null 2>&1  # the folder's first run fills the JIT cache (tests/test_serving.py)
s=$(date +%s.%N); eval "$argv" > "$out/alone.txt" 2>&1; e=$(date +%s.%N)
echo "alone $(python3 -c "print(f'{$e - $s:.1f}')") s: $(grep -o '"tokens_per_s": [0-9.]*' "$out/alone.txt")"
s=$(date +%s.%N); python3 -m snakemake --cores 1 results/report.html > "$out/snakemake.txt" 2>&1; rc=$?
e=$(date +%s.%N)
echo "workflow rc $rc $(python3 -c "print(f'{$e - $s:.1f}')") s; jobs: $(tail -qn1 results/serve/benchmarks/*.tsv | cut -f1 | tr '\n' ' ')"
cp results/serve/plan.json "$out/"; tar czf "$out/wf-logs.tgz" results/serve/logs
cd "$root" || exit 1
step=$(python3 -c 'from nsightflow.workloads import serving; print(serving.STEP)')
eval "python3 benchmarks/launch_layers.py --plan $out/plan.json --keep $out/reps \
  --only ncu,ncu-plan,ncu-plan-app,ncu-plan-no-flush --step-function iteration=$step -- $argv" 2>&1 | tee "$out/layers.txt"
python3 - "$out/reps" <<'EOF'
import io, subprocess, sys
from pathlib import Path
import pandas as pd
cols = ["gpu__time_duration.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "dram__bytes_read.sum",
        "dram__bytes_write.sum", "lts__t_bytes.sum", "l1tex__t_bytes.sum"]
for rep in sorted(Path(sys.argv[1]).glob("*.ncu-rep")):
    text = subprocess.run(["ncu", "--import", str(rep), "--page", "raw", "--csv", "--print-units", "base"],
                          capture_output=True, text=True).stdout
    df = pd.read_csv(io.StringIO(text), skiprows=[1], thousands=",", low_memory=False)
    have = [c for c in cols if c in df]
    sums = {c: f"{pd.to_numeric(df[c], errors='coerce').sum():.6g}" for c in have}
    print(f"{rep.name}: {len(df)} results; sums {sums}")
EOF
rm -rf "$wf"
