#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): the workflow's cost on the serving GPU
# test's loop (1B Llama shape, random weights; tests/test_serving.py), or on the same loop with other serving
# arguments, against the loop alone: in a fresh workflow folder, one uncounted run of the loop (it fills the folder's
# JIT cache), the loop alone, `snakemake --cores 1 results/report.html`, the loop alone again; each one's seconds and
# tokens/s, the jobs' seconds and the ratio to the mean of the two runs alone. The plan, the program's output and the
# jobs' logs land in OUTDIR (the loop's command line in OUTDIR/argv); the workflow's folder is printed (`wf ...`)
# and left for the caller.
#   bash benchmarks/serving_workflow.sh OUTDIR [serving arguments, default: the GPU test's 64 requests]
set -u
out=$(realpath -m "$1"); shift; mkdir -p "$out"
extra=("$@"); [ ${#extra[@]} -eq 0 ] && extra=(--requests 64 --prompt 256 --prompt-spread 192 --new 64 --new-spread 48)
wf=$(mktemp -d /tmp/serving-wf.XXXX)
argv=$(python3 - "${extra[@]}" <<'PY'
import json, shlex, sys
sys.path.insert(0, "tests")
from test_serving import SERVE_1B
print(shlex.join(["python3", "-m", "nsightflow.workloads.serving", "--config", json.dumps(SERVE_1B), "--dtype",
                  "bfloat16", "--device", "cuda", *sys.argv[1:]]))
PY
)
echo "$argv" > "$out/argv"  # the loop's command line, for a caller
python3 - "$wf" "$argv" <<'PY'
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
PY
cd "$wf" || exit 1
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
alone() {  # alone LABEL: one run of the loop alone, its seconds (appended to $out/alone.s) and tokens/s
  local s e
  s=$(date +%s.%N); eval "$argv" > "$out/$1.txt" 2>&1; e=$(date +%s.%N)
  secs "$s" "$e" >> "$out/alone.s"
  echo "$1 $(secs "$s" "$e") s: $(grep -o '"tokens_per_s": [0-9.]*' "$out/$1.txt")"
}
eval "$argv" > /dev/null 2>&1  # the folder's first run fills the JIT cache (tests/test_serving.py)
: > "$out/alone.s"
alone alone-before
s=$(date +%s.%N); python3 -m snakemake --cores 1 results/report.html > "$out/snakemake.txt" 2>&1; rc=$?
e=$(date +%s.%N); w=$(secs "$s" "$e")
alone alone-after
echo "workflow rc $rc $w s, $(python3 -c "import sys; a = [float(x) for x in open(sys.argv[2])]; \
print(f'{float(sys.argv[1]) / (sum(a) / len(a)):.2f}x the mean of the runs alone')" "$w" "$out/alone.s"); jobs (s): \
$(for t in results/serve/benchmarks/*.tsv; do printf '%s %s ' "$(basename "$t" .tsv)" "$(tail -n1 "$t" | cut -f1)"; done)"
grep -h "launches in\|profiling" results/serve/logs/ncu_capture.log | head -2
cp results/serve/plan.json "$out/" 2>/dev/null; tar czf "$out/wf-logs.tgz" results/serve/logs .snakemake/log 2>/dev/null
echo "wf $wf"
