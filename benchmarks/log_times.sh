#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): benchmarks/serving_workflow.sh on the
# serving GPU test's loop, with every line of its timeline and ncu jobs' logs stamped with the time it appeared
# (OUTDIR/timeline.stamped, OUTDIR/ncu_capture.stamped: epoch seconds, then the line). ncu prints a line for each
# launch it profiles, so the ncu log's stamps split the ncu launch into its start (to the first window's first
# profiled launch, the loop's first iteration), its run through the plan's windows and its end (the last profiled
# launch to ncu's exit), and, by the plan (OUTDIR/plan.json), the time inside each window and between windows (ms an
# iteration of the loop under ncu's hold), to set beside the timed run's start and loop in the timeline log.
#   bash benchmarks/log_times.sh OUTDIR [serving arguments]
set -u -m  # -m: each follower below runs in a process group of its own, killed whole at the end
out=$(realpath -m "$1")
mkdir -p "$out"
touch "$out/.began"  # the followers take the workflow folder serving_workflow.sh makes after this
stamp() {  # stamp LOG: each line of that folder's results/serve/logs/LOG with the time it appeared
  local f=""
  until [ -n "$f" ]; do
    f=$(find /tmp -maxdepth 1 -name 'serving-wf.*' -newer "$out/.began" 2>/dev/null | head -n1)
    [ -n "$f" ] && { f="$f/results/serve/logs/$1"; [ -e "$f" ] || f=""; }
    sleep 0.02
  done
  tail -n +1 -F "$f" 2>/dev/null | while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done
}
stamp timeline.log > "$out/timeline.stamped" &
a=$!
stamp ncu_capture.log > "$out/ncu_capture.stamped" &
b=$!
bash "$(dirname "$0")/serving_workflow.sh" "$@"
sleep 1
kill -- -"$a" -"$b" 2>/dev/null
span=$(grep -o 'ran from [0-9.]* to [0-9.]*' "$out/ncu_capture.stamped" | tail -n1)  # the last ncu launch's
python3 - "$out" "$span" <<'PY'
import json, sys
from collections import Counter
out, span = sys.argv[1], sys.argv[2].split()
began, ended = (float(span[2]), float(span[4])) if len(span) == 5 else (float("nan"), float("nan"))
stamps = [float(line.split(" ", 1)[0]) for line in open(f"{out}/ncu_capture.stamped") if "==PROF== Profiling" in line]
print(f"ncu launch: start to its first profiled launch {stamps[0] - began:.1f} s, first to last "
      f"{stamps[-1] - stamps[0]:.1f} s, last to ncu's exit {ended - stamps[-1]:.1f} s, in all {ended - began:.1f} s")
plan = json.load(open(f"{out}/plan.json"))  # the plan's launches by step, in the order ncu profiles them
per_step = Counter(int(e["step"]) for e in plan["expected"])
windows, i = [], 0
for step in sorted(per_step):
    windows.append((step, stamps[i], stamps[i + per_step[step] - 1]))
    i += per_step[step]
inside = sum(last - first for _, first, last in windows)
between = [(s0, s1, f1 - l0) for (s0, _, l0), (s1, f1, _) in zip(windows, windows[1:])]
print(f"{len(windows)} windows ({len(stamps)} profiled launches, {i} planned): {inside:.1f} s inside them, "
      f"{sum(g for *_, g in between):.1f} s between them, over {sum(s1 - s0 - 1 for s0, s1, _ in between)} iterations")
for s0, s1, gap in between:
    print(f"  iterations {s0} to {s1}: {gap:.2f} s, {gap / (s1 - s0) * 1e3:.0f} ms an iteration")
PY
