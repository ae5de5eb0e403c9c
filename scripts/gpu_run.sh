#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): run the GPU test tier,
# which runs the whole workflow on the default config, and bring back its results (no .ncu-rep: too big).
set -u
export PYTHONUNBUFFERED=1
keep=/tmp/nsightflow-results
rm -rf "$keep"
NSIGHTFLOW_KEEP_RESULTS=$keep python3 -m pytest -m gpu -v -s tests/test_gpu.py 2>&1 | tee /tmp/gpu_tests.log
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  cp /tmp/gpu_tests.log "$OUT/"
  tar czf "$OUT/results.tar.gz" --exclude='*.ncu-rep' -C "$keep" . 2>/dev/null
  ls -la "$OUT"
fi
exit $rc
