#!/bin/bash
# On the GPU host, a GPU-tier pytest session longer than one device call (600 s): `bash benchmarks/gpu_session.sh
# start <pytest args...>` copies the tree to /tmp/nf (later calls re-send the working tree; the running tests keep
# their own copy), activates .gpu-bundle there and starts one pytest session in a process session of its own, which
# runs on while the machine stays warm; every call (`bash benchmarks/gpu_session.sh`, and start) then waits up to
# WAIT seconds (default 560) for it, prints the tail, and brings the log back under $OUT (the tests' logs so far too,
# as logs.tgz). Call again within the machine's idle release (30 s) or the session is lost (a call that finds a fresh
# machine says so and ends at once, rather than waiting WAIT seconds on nothing).
# Needs NSIGHTFLOW_CORPUS's programs in .corpus/ for the corpus tests; carry .gpu-bundle, .corpus and benchmarks.
W=/tmp/nf
if [ "$1" = start ]; then
  shift
  rm -rf $W /tmp/nf-bt /tmp/nf.log; mkdir -p $W; cp -a . $W/; cd $W || exit 1
  . .gpu-bundle/activate.sh
  nvidia-smi -L
  export NSIGHTFLOW_CORPUS=$W/.corpus PYTHONUNBUFFERED=1
  printf '%q ' "$@" > /tmp/nf.args
  setsid nohup bash -c "cd $W && date +%s > /tmp/nf.began && python3 -m pytest -m gpu -v -s -p no:cacheprovider -rA --tb=short --durations=0 --timeout=2400 --basetemp=/tmp/nf-bt $(cat /tmp/nf.args) > /tmp/nf.log 2>&1; echo EXIT \$? >> /tmp/nf.log" >/dev/null 2>&1 < /dev/null &
  sleep 2
fi
if [ ! -f /tmp/nf.began ]; then  # a fresh machine: the session's earlier one was given back (idle, or taken)
  echo "no pytest session on this machine: the one started earlier was lost with its machine; start again"; exit 3
fi
end=$((SECONDS + ${WAIT:-560}))
while [ $SECONDS -lt $end ] && ! grep -q '^EXIT' /tmp/nf.log 2>/dev/null; do sleep 5; done
echo "== elapsed $(( $(date +%s) - $(cat /tmp/nf.began) )) s"
grep -E " (PASSED|FAILED|ERROR)|^EXIT|^(FAILED|ERROR|PASSED) " /tmp/nf.log | tail -30
echo "== tail"; tail -c 7000 /tmp/nf.log
cp /tmp/nf.log "$OUT/"
# where a running session stands: its processes, the GPUs, and (py-spy where the bundle has it) each program's stacks
if ! grep -q '^EXIT' /tmp/nf.log 2>/dev/null; then
  { ps -eo pid,ppid,etime,pcpu,rss,args --forest | grep -v -E ' (ps|grep|bash -c) ' | tail -60; nvidia-smi
    for p in $(pgrep -f "${DIAG:-train.py}"); do echo "== py-spy $p"; timeout 20 py-spy dump --pid "$p" 2>&1 | head -40; done
  } > "$OUT/host.txt" 2>&1
fi
# the tests' logs so far, running or ended (a job's log follows its tool as it runs: where a long one stands)
(cd /tmp/nf-bt 2>/dev/null && find . -name '*.log' -size -4M | tar czf "$OUT/logs.tgz" -T -)
