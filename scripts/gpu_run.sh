#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): optionally probe ncu's
# kernel filters, run the GPU test tier (which runs the whole workflow), and bring back the results
# (no .ncu-rep: too big). Usage: bash scripts/gpu_run.sh [--probe] [pytest -k expression]
set -u
export PYTHONUNBUFFERED=1
if [ "${1:-}" = "--probe" ]; then
  shift
  python3 scripts/gpu_probe_filter.py /tmp/nsightflow-probe 2>&1 | tail -20
  [ -n "${OUT:-}" ] && tar czf "$OUT/probe.tar.gz" --exclude='*.ncu-rep' --exclude='*.nsys-rep' -C /tmp nsightflow-probe
fi
keep=/tmp/nsightflow-results
rm -rf "$keep"
NSIGHTFLOW_KEEP_RESULTS=$keep python3 -m pytest -m gpu -v -s tests/test_gpu.py ${1:+-k "$1"} 2>&1 | tee /tmp/gpu_tests.log
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  cp /tmp/gpu_tests.log "$OUT/"
  tar czf "$OUT/results.tar.gz" --exclude='*.ncu-rep' --exclude='*.nsys-rep' -C "$keep" . 2>/dev/null
  ls -la "$OUT"
fi
exit $rc
