#!/bin/bash
# On the GPU host, a GPU-tier pytest session longer than one device call (600 s): `bash benchmarks/gpu_session.sh
# start <pytest args...>` copies the tree to /tmp/nf (later calls re-send the working tree; the running tests keep
# their own copy), activates .gpu-bundle there and starts one pytest session in a process session of its own, which
# runs on while the machine stays warm; every call (`bash benchmarks/gpu_session.sh`, and start) then waits up to
# WAIT seconds (default 560) for it, prints each test's result and a short tail (TAIL characters in all), and brings
# the log back under $OUT (the tests' logs so far too, as logs.tgz). Call again within the machine's idle release
# (30 s: a reply read slowly loses it) or the session is lost (a call that finds a fresh machine says so and ends at
# once, rather than waiting WAIT seconds on nothing).
# Two sessions at once on a machine of two GPUs: `WAIT=0 GPU=0 bash benchmarks/gpu_session.sh start <args>` and then
# `GPU=1 bash benchmarks/gpu_session.sh start <other args>` in the same call, each seeing its GPU alone
# (CUDA_VISIBLE_DEVICES); a call without start follows every session on the machine until all have ended or WAIT
# passes. Tests that need two GPUs belong in a session without GPU set (it sees them all), or with GPU=2,3; a session
# started with AFTER=2_3 (that session's name) waits for it to end before its tests start.
# Each session's tests have a TMPDIR of their own (tests/conftest.py), where ncu keeps the lock that makes ncu
# processes take turns: on distinct GPUs two sessions' ncu captures ran at once and both completed (2026-11-28,
# docs/gpu-host.md); two ncu processes with different locks on one GPU refused ("a driver resource was unavailable").
# Needs NSIGHTFLOW_CORPUS's programs in .corpus/ for the corpus tests; carry .gpu-bundle, .corpus and benchmarks.
# REPEAT=3 runs the session's tests three times in a row (a pace test's spread from run to run on one machine).
# KEEP='<glob>' brings back the tests' files of that name too (under 40 MB, each one found listed with its size),
# beside their logs in logs.tgz.
S=${GPU:+-${GPU//,/_}}  # one session's files (GPU 2,3: nf-2_3, a name $OUT brings back): /tmp/nf$S (its tree),
# .log, .began, -bt (pytest's basetemp)
if [ "$1" = start ]; then
  shift
  W=/tmp/nf$S
  rm -rf $W $W-bt $W.log $W.began; mkdir -p $W; cp -a . $W/; cd $W || exit 1
  . .gpu-bundle/activate.sh
  nvidia-smi -L
  export NSIGHTFLOW_CORPUS=$W/.corpus PYTHONUNBUFFERED=1
  [ -n "$GPU" ] && export CUDA_VISIBLE_DEVICES=$GPU
  printf '%q ' "$@" > $W.args
  # AFTER=<another session's GPU list, as in its name> (e.g. 2_3): this one's tests wait until that session has ended
  # (two-GPU tests first on GPUs 2 and 3, then a session on each of them alone)
  wait_for=${AFTER:+"echo waiting for session $AFTER > $W.log; until grep -q '^EXIT' /tmp/nf-$AFTER.log 2>/dev/null; do sleep 5; done;"}
  # REPEAT=N: the same tests N times in a row, each run with its own basetemp ($W-bt/N); the session's exit status is
  # the last run's, each run's own on a line "RUN i rc"
  mkdir -p $W-bt
  runs="for i in \$(seq ${REPEAT:-1}); do echo \"RUN \$i\"; python3 -m pytest -m gpu -v -s -p no:cacheprovider -rA --tb=short --durations=0 --timeout=2400 --basetemp=$W-bt/\$i $(cat $W.args); rc=\$?; echo \"RUN \$i rc \$rc\"; done; exit \$rc"
  setsid nohup bash -c "cd $W && date +%s > $W.began && $wait_for ( $runs ) > $W.log 2>&1; echo EXIT \$? >> $W.log" >/dev/null 2>&1 < /dev/null &
  sleep 2
  cd - >/dev/null || exit 1
fi
sessions=$(ls /tmp/nf*.began 2>/dev/null | sed 's/\.began$//')
if [ -z "$sessions" ]; then  # a fresh machine: the session's earlier one was given back (idle, or taken)
  echo "no pytest session on this machine: the one started earlier was lost with its machine; start again"; exit 3
fi
ended() { for w in $sessions; do grep -q '^EXIT' $w.log 2>/dev/null || return 1; done; }
end=$((SECONDS + ${WAIT:-560}))
while [ $SECONDS -lt $end ] && ! ended; do sleep 5; done
for w in $sessions; do
  n=$(basename $w)
  echo "== $n: elapsed $(( $(date +%s) - $(cat $w.began) )) s"
  # each test's result on one line (with -s a test's output stands between its name and its result), then a short
  # tail: the whole log comes back under $OUT, and a short reply keeps the next call within the idle release
  awk '/^tests\/[^ ]*::/ {t = $1} /(^| )(PASSED|FAILED|ERROR)( |$)/ && t != "" {print t, ($0 ~ /FAILED/ ? "FAILED" : $0 ~ /ERROR/ ? "ERROR" : "PASSED"); t = ""} /^EXIT/' $w.log | tail -40
  echo "== $n: tail"; tail -c $((${TAIL:-2400} / $(echo $sessions | wc -w))) $w.log
  cp $w.log "$OUT/"
  # the tests' logs so far, running or ended (a job's log follows its tool as it runs: where a long one stands), and
  # the files named by KEEP (a glob, e.g. KEEP='stages.csv': a file a test's workflow wrote, for a look afterwards)
  # (a record of many steps passes 4 MB: KEEP's files up to 40 MB, which gzip brings under the reply's 16 MiB a file;
  # each one found is listed with its size, so a file that did not come back says why)
  (cd $w-bt 2>/dev/null && { find . -size -4M -name '*.log'; [ -n "$KEEP" ] && find . -size -40M -name "$KEEP"; } |
    tar czf "$OUT/$n-logs.tgz" -T -)
  [ -n "$KEEP" ] && (cd $w-bt 2>/dev/null && find . -name "$KEEP" -printf "KEEP %p %s bytes\n" | head -20)
done
# where a running session stands: its processes, the GPUs, and (py-spy where the bundle has it) each program's stacks
if ! ended; then
  { ps -eo pid,ppid,etime,pcpu,rss,args --forest | grep -v -E ' (ps|grep|bash -c) ' | tail -60; nvidia-smi
    for p in $(pgrep -f "${DIAG:-train.py}"); do echo "== py-spy $p"; timeout 20 py-spy dump --pid "$p" 2>&1 | head -40; done
  } > "$OUT/host.txt" 2>&1
fi
