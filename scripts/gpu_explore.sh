#!/usr/bin/env bash
# One-off exploration on the GPU host: records real captures of the default workload and
# probes ncu's NVTX/kernel-name matching. Writes everything to $OUT/explore.tar.gz.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/explore; mkdir -p $W; cd "$(dirname "$0")/.."
ROOT=$(pwd)
log() { echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $W/smi.txt
ARGS='{"batch":4,"prompt":512,"decode_steps":8}'
PROG=(python3 -m nsightflow.harness --args "$ARGS" --out $W/run.json)
log nsys; t0=$(date +%s%N)
nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite=true -o $W/timeline "${PROG[@]}" > $W/nsys_profile.log 2>&1; echo rc=$?
t1=$(date +%s%N); echo "nsys profile s: $(( (t1 - t0)/1000000 )) ms"
nsys stats --report cuda_gpu_kern_sum --report nvtx_sum --report nvtx_kern_sum --format csv --force-export=true -o $W/stats $W/timeline.nsys-rep > $W/nsys_stats.log 2>&1; echo stats rc=$?
ls -la $W
python3 - <<'PY'
import sqlite3
c = sqlite3.connect('/tmp/explore/timeline.sqlite')
out = open('/tmp/explore/sqlite_schema.txt', 'w')
for (name, sql) in c.execute("select name, sql from sqlite_master where type='table'"):
    out.write(sql + "\n")
for t in ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds", "ENUM_NSYS_EVENT_TYPE", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE"]:
    try:
        cur = c.execute(f"select * from {t} limit 12")
        out.write(f"-- {t}: " + ",".join(d[0] for d in cur.description) + "\n")
        for r in cur: out.write(repr(r) + "\n")
    except Exception as e:
        out.write(f"-- {t}: {e}\n")
out.close()
PY
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__cycles_elapsed.avg.per_second,sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_fp16.sum,sm__ops_path_tensor_src_tf32_dst_fp32.sum,sm__ops_path_tensor_src_fp8.sum,sm__ops_path_tensor_src_fp64.sum,sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__sass_thread_inst_executed_op_dadd_pred_on.sum,sm__sass_thread_inst_executed_op_dmul_pred_on.sum,sm__sass_thread_inst_executed_op_dfma_pred_on.sum,sm__sass_thread_inst_executed_op_hadd_pred_on.sum,sm__sass_thread_inst_executed_op_hmul_pred_on.sum,sm__sass_thread_inst_executed_op_hfma_pred_on.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,l1tex__t_bytes.sum,sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained,sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained,dram__bytes.sum.peak_sustained,lts__t_bytes.sum.peak_sustained,l1tex__t_bytes.sum.peak_sustained,launch__grid_size,launch__block_size
ncu --query-metrics --chip gh100 > $W/query_metrics.txt 2>&1
NCU=(ncu --clock-control none --nvtx --metrics $M)
log ncu prefill all kernels; t0=$(date +%s%N)
"${NCU[@]}" --nvtx-include "nsightflow@prefill/" -f -o $W/prefill "${PROG[@]}" > $W/ncu_prefill.log 2>&1; echo rc=$?
t1=$(date +%s%N); echo "ncu prefill s: $(( (t1 - t0)/1000000 )) ms"; tail -3 $W/ncu_prefill.log
log ncu decode skip 10 count 30
"${NCU[@]}" --nvtx-include "nsightflow@decode/" --launch-skip 10 --launch-count 30 -f -o $W/decode "${PROG[@]}" > $W/ncu_decode.log 2>&1; echo rc=$?; tail -3 $W/ncu_decode.log
for r in prefill decode; do
  ncu --import $W/$r.ncu-rep --page raw --csv --print-units base > $W/$r.raw.csv 2>$W/$r.import.err; echo import rc=$?
  ncu --import $W/$r.ncu-rep --page raw --csv --print-units base --print-kernel-base demangled > $W/$r.raw_demangled.csv 2>/dev/null
  ncu --import $W/$r.ncu-rep --page raw --csv > $W/$r.raw_autounits.csv 2>/dev/null
done
log kernel-name regex from nsys names
python3 - <<'PY' > $W/regex_probe.txt 2>&1
import csv, re, subprocess, json, time
rows = list(csv.DictReader(open('/tmp/explore/stats_nvtx_kern_sum.csv')))
print(rows[0].keys())
pre = [r for r in rows if 'prefill' in r['NVTX Range']]
pre.sort(key=lambda r: -float(r['Total Time (ns)']))
names = [r['Kernel Name'] for r in pre[:4]]
def esc(s): return re.sub(r'([\\^$.|?*+()\[\]{}])', r'\\\1', s)
for n in names: print("NAME", n)
rx = 'regex:^(' + '|'.join(esc(n) for n in names) + ')$'
cmd = ['ncu','--clock-control','none','--nvtx','--nvtx-include','nsightflow@prefill/','--kernel-name-base','demangled','--kernel-name',rx,'--metrics','gpu__time_duration.sum','-f','-o','/tmp/explore/rx','python3','-m','nsightflow.harness','--args','{"batch":4,"prompt":512,"decode_steps":8}']
t=time.time(); p = subprocess.run(cmd, capture_output=True, text=True); print("rc", p.returncode, "s", time.time()-t)
print(p.stdout[-1500:]); print(p.stderr[-1500:])
for n in names:
    cmd2 = cmd[:]; cmd2[cmd.index(rx)] = 'regex:^' + esc(n) + '$'; cmd2[cmd.index('/tmp/explore/rx')] = '/tmp/explore/rx1'
    p = subprocess.run(cmd2, capture_output=True, text=True)
    print("single", n[:60], "profiled:", p.stdout.count('==PROF== Profiling'), "nokernels" if 'No kernels were profiled' in p.stdout+p.stderr else "")
PY
cat $W/regex_probe.txt | tail -12
log at-sign range probe
cat > $W/at.py <<'PY'
import torch, nvtx
x = torch.randn(256, 256, device='cuda'); x @ x; torch.cuda.synchronize()
for i in range(2):
    with nvtx.annotate("LLM@prefill", domain="LLM", payload=i):
        y = x @ x; y = y + 1; torch.cuda.synchronize()
    with nvtx.annotate("a/b c;$(x)", domain="my dom", payload=i):
        y = x @ x; torch.cuda.synchronize()
PY
for e in 'regex:LLM@^LLM\x40prefill$/' 'regex:LLM@LLM\x40prefill/' 'regex:LLM@^LLM.prefill$/' 'regex:^LLM\x40prefill$/' 'regex:my dom@^a\x2fb c;\$\(x\)$/' 'regex:my dom@^a.b c;\$\(x\)$/' 'my dom@a/b c;$(x)/'; do
  out=$(ncu --clock-control none --nvtx --nvtx-include "$e" --metrics gpu__time_duration.sum python3 $W/at.py 2>&1)
  echo "EXPR [$e] rc=$? profiled=$(echo "$out" | grep -c '==PROF== Profiling') $(echo "$out" | grep -E 'No kernels|ERR|rror|nvalid' | head -2)"
done | tee $W/at_probe.txt
ncu --clock-control none --nvtx --nvtx-include "LLM@LLM@prefill/" --metrics gpu__time_duration.sum -f -o $W/at python3 $W/at.py > /dev/null 2>&1
ncu --clock-control none --nvtx --nvtx-include 'regex:LLM@.*prefill.*/' --metrics gpu__time_duration.sum -f -o $W/at python3 $W/at.py > $W/at_ok.log 2>&1
ncu --import $W/at.ncu-rep --page raw --csv --print-units base > $W/at.raw.csv 2>&1
log range replay on decode
ncu --clock-control none --nvtx --nvtx-include "nsightflow@decode/" --replay-mode range --launch-count 1 --metrics gpu__time_duration.sum "${PROG[@]}" > $W/range_decode.log 2>&1; echo rc=$?; tail -5 $W/range_decode.log
log flops mode; python3 -m nsightflow.harness --args "$ARGS" --mode flops --out $W/flops.json; echo rc=$?
rm -f $W/*.qdstrm
tar czf $OUT/explore.tar.gz -C /tmp explore; ls -la $OUT
