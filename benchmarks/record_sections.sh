#!/usr/bin/env bash
# On the GPU host: record what ncu's deep-dive sections (speed of light, occupancy, warp states, memory workload)
# export for two launches of the small decoder's prefill GEMM and attention, as raw CSV and the details page (rule
# messages), into $OUT/sections/ (fixtures for the per-kernel cards).
set -u
out="${OUT:-/tmp}/sections"
mkdir -p "$out"
ncu --force-overwrite --export "$out/sections" --nvtx --nvtx-include "nsightflow@prefill/" --launch-count 6 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --clock-control none \
  python3 -m nsightflow.capture.inside.harness --args '{"batch": 2, "prompt": 128, "decode_steps": 2, "n_layers": 1}' \
  > "$out/capture.log" 2>&1
ncu --import "$out/sections.ncu-rep" --page raw --csv --print-units base --print-kernel-base mangled > "$out/raw.csv"
ncu --import "$out/sections.ncu-rep" --page details --print-details all > "$out/details.txt"
rm -f "$out/sections.ncu-rep"
wc -l "$out"/*
