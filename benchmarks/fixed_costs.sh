#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): what the workflow's fixed steps cost
# there, each timed three times: the host queries the Snakefile and the preflight make, Snakemake's start (a dry run of
# the default workflow), and ncu's cost of a profiled launch by how windows are laid out (benchmarks/window_costs.py).
set -u
t() {  # t LABEL CMD...: the command's wall seconds, three times
  local label=$1; shift
  local out=""
  for _ in 1 2 3; do
    local s=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    out+=" $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$s" "$(date +%s.%N)")"
  done
  printf '%-44s%s\n' "$label" "$out"
}
t "nvidia-smi --query-gpu=name" nvidia-smi --query-gpu=name --format=csv,noheader
t "nvidia-smi --query-gpu=name,driver_version" nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t "nsys --version" nsys --version
t "ncu --version" ncu --version
t "python3 -c 'import torch'" python3 -c "import torch"
t "python3 -c 'import matplotlib.pyplot'" python3 -c "import matplotlib.pyplot"
t "snakemake -n results/report.html" snakemake -n --cores 1 results/report.html
python3 benchmarks/window_costs.py
python3 benchmarks/trace_costs.py
