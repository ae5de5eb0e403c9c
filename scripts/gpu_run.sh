#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): run the GPU test tier (which runs
# the whole workflow several times) and bring back its log and results (no .ncu-rep/.nsys-rep: too big).
# Usage: bash scripts/gpu_run.sh [pytest -k expression] [timeout seconds]
set -u
export PYTHONUNBUFFERED=1
export NSIGHTFLOW_HOOK_DEBUG=1  # a command workload's hook says each step it sees (in the job logs)
keep=/tmp/nsightflow-results
rm -rf "$keep"
mkdir -p "$keep"
NSIGHTFLOW_KEEP_RESULTS=$keep timeout "${2:-570}" python3 -m pytest -m gpu -v -s -p no:cacheprovider --durations=0 \
  tests/test_gpu.py ${1:+-k "$1"} 2>&1 | tee /tmp/gpu_tests.log
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  cp /tmp/gpu_tests.log "$OUT/"
  tar czf "$OUT/results.tar.gz" -C "$keep" . 2>/dev/null
  ls -la "$OUT"
fi
exit "$rc"
