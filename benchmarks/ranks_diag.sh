#!/usr/bin/env bash
# On a GPU host with two GPUs (after `. .gpu-bundle/activate.sh`): how nsys and ncu see a torchrun job of two ranks.
set -u
out=${OUT:-/tmp/ranks-diag}
mkdir -p "$out" /tmp/rd
nvidia-smi -L
ncu --help | grep -iE -A2 "lockstep|communicator|target-processes" | head -40
run() { echo "== $1"; shift; /usr/bin/time -f "%e s" timeout "$@"; echo "rc=$?"; }
for mode in data tensor; do
  run "nsys torchrun $mode" 150 nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \
    -o /tmp/rd/$mode -f true python3 -m torch.distributed.run --nproc_per_node 2 examples/ranks_program.py --parallel $mode > "$out/nsys_$mode.log" 2>&1
  tail -5 "$out/nsys_$mode.log"
  nsys export --type sqlite -o /tmp/rd/$mode.sqlite -f true /tmp/rd/$mode.nsys-rep > /dev/null 2>&1
  python3 - /tmp/rd/$mode.sqlite <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
q = lambda s: con.execute(s).fetchall()
print("kernels per pid, device:", q("SELECT (globalPid>>24)&16777215, deviceId, count(*), sum(demangledName IN (SELECT id FROM StringIds WHERE value LIKE '%nccl%')) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1,2"))
print("nvtx per pid:", q("SELECT (globalTid>>24)&16777215, count(*) FROM NVTX_EVENTS WHERE eventType=59 GROUP BY 1"))
print("nccl names:", q("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id=k.demangledName WHERE s.value LIKE '%nccl%' LIMIT 5"))
print("processes:", q("SELECT * FROM PROCESSES LIMIT 10") if q("SELECT name FROM sqlite_master WHERE name='PROCESSES'") else "no table")
PY
done
base=(ncu --profile-from-start off --target-processes all --metrics gpu__time_duration.sum --clock-control none --csv --page raw --print-units base)
run "ncu rank0, nccl left out" 150 "${base[@]}" --kernel-name "regex:^(?!nccl)" python3 -m torch.distributed.run --nproc_per_node 2 benchmarks/ranks_diag.py > "$out/ncu_filtered.csv" 2> "$out/ncu_filtered.err"
grep -c '"' "$out/ncu_filtered.csv"; cut -c1-200 "$out/ncu_filtered.csv" | head -3; grep -o 'nccl[A-Za-z_]*' "$out/ncu_filtered.csv" | sort | uniq -c; tail -5 "$out/ncu_filtered.err"
run "ncu rank1, nccl left out" 150 env DIAG_RANK=1 "${base[@]}" --kernel-name "regex:^(?!nccl)" python3 -m torch.distributed.run --nproc_per_node 2 benchmarks/ranks_diag.py > "$out/ncu_rank1.csv" 2> "$out/ncu_rank1.err"
grep -c '"' "$out/ncu_rank1.csv"; tail -3 "$out/ncu_rank1.err"
run "ncu rank0, every kernel (nccl in)" 90 "${base[@]}" python3 -m torch.distributed.run --nproc_per_node 2 benchmarks/ranks_diag.py > "$out/ncu_all.csv" 2> "$out/ncu_all.err"
grep -c '"' "$out/ncu_all.csv"; grep -o 'nccl[A-Za-z_]*' "$out/ncu_all.csv" | sort | uniq -c; tail -5 "$out/ncu_all.err"
echo "== one GPU, two ranks (gloo)"
CUDA_VISIBLE_DEVICES=0 timeout 150 nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none -o /tmp/rd/one -f true \
  python3 -m torch.distributed.run --nproc_per_node 2 examples/ranks_program.py --parallel tensor > "$out/one.log" 2>&1; echo "rc=$?"; tail -3 "$out/one.log"
