#!/usr/bin/env bash
# On the GPU host (project root, after `. .gpu-bundle/activate.sh`): ncu's hold on every launch outside its windows
# (benchmarks/ncu_launch_costs.py's loop, nothing profiled) under other ncu options, twice each.
P="python3 benchmarks/ncu_launch_costs.py program plain"
run() { echo -n "$1: "; shift; "$@" 2>/dev/null | grep RESULT | tr '\n' ' '; echo; }
for i in 1 2; do
run "alone" $P
run "ncu base" ncu --profile-from-start off --replay-mode=kernel --clock-control=none $P
run "ncu base --cache-control none" ncu --profile-from-start off --replay-mode=kernel --clock-control=none --cache-control=none $P
run "ncu application replay" ncu --profile-from-start off --replay-mode=application --clock-control=none $P
run "ncu --kernel-name never" ncu --profile-from-start off --clock-control=none --kernel-name regex:^nomatch_xyz$ $P
run "ncu --launch-count 1" ncu --profile-from-start off --clock-control=none --launch-count 1 $P
done
