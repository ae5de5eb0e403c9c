#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): benchmarks/serving_workflow.sh on the
# serving GPU test's loop, with every line of its timeline and ncu jobs' logs stamped with the time it appeared
# (OUTDIR/timeline.stamped, OUTDIR/ncu_capture.stamped: epoch seconds, then the line). ncu prints a line for each
# launch it profiles, so the ncu log's stamps split the ncu launch into its start (to the first window's first
# profiled launch, the loop's first iteration), its run through the plan's windows and its end (the last profiled
# launch to ncu's exit), to set beside the timed run's start and loop in the timeline log.
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
first=$(grep -m1 '==PROF== Profiling' "$out/ncu_capture.stamped" | cut -d' ' -f1)
last=$(grep '==PROF== Profiling' "$out/ncu_capture.stamped" | tail -n1 | cut -d' ' -f1)
span=$(grep -o 'ran from [0-9.]* to [0-9.]*' "$out/ncu_capture.stamped" | tail -n1)  # the last ncu launch's
began=$(echo "$span" | cut -d' ' -f3)
ended=$(echo "$span" | cut -d' ' -f5)
python3 - "$began" "$first" "$last" "$ended" <<'PY'
import sys
b, f, l, e = (float(x) if x else float("nan") for x in sys.argv[1:])
print(f"ncu launch: start to its first profiled launch {f - b:.1f} s, first to last {l - f:.1f} s, "
      f"last to ncu's exit {e - l:.1f} s, in all {e - b:.1f} s")
PY
