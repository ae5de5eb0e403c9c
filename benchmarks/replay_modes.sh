#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): what a profiled launch of the serving
# loop costs by ncu's kernel replay (the capture's), by application replay and by kernel replay with the caches left
# as they are, and whether the counters agree. The loop is the serving GPU test's (1B Llama shape, random weights,
# 64 requests; tests/test_serving.py). Steps: benchmarks/serving_workflow.sh (the loop alone and the workflow on it:
# its plan.json, the jobs' seconds); then benchmarks/launch_layers.py with that plan (ncu-plan, ncu-plan-app,
# ncu-plan-no-flush), the reports kept; then each report's counters summed over its results, side by side. Everything
# lands in $1.
#   bash benchmarks/replay_modes.sh OUTDIR
set -u
out=$(realpath -m "$1"); mkdir -p "$out"
# its lines to a file first: `tee /dev/stderr` reopens a stderr that is a file, truncating it, and the caller's
# later output wrote over them (seen 2026-12-02 with stdout and stderr both in one log)
bash benchmarks/serving_workflow.sh "$out" > "$out/workflow.txt"
cat "$out/workflow.txt"
wf=$(sed -n 's/^wf //p' "$out/workflow.txt")
argv=$(cat "$out/argv")
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
