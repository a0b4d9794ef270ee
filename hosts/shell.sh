# gpudispatch job shell. Run by bash on the job's machine, it runs the jobs its
# coordinator sends, one after another. Everything arrives on stdin, so a job
# line reaches the login shell byte for byte with no quoting at all.
#
# stdin: NUL-terminated fields — heartbeat timeout (seconds), grace (50 ms
# ticks) — then per job: end mark, workdir, setup, script, env count N, then N
# "NAME=value"; while the job runs, one byte per heartbeat.
#
# Each job runs in a subshell of its own (its environment and workdir go with
# it) and a process group of its own, with the shell's stdout and stderr. Once
# the job and its group are gone, the shell writes NUL and the end mark on
# stderr, then NUL, the end mark, a space, the exit status and a newline on
# stdout: the coordinator splits the streams there. The mark is new for each
# job and never in a job's environment, so a job cannot end its own output.
#
# When stdin ends (cancel, coordinator gone) or stays silent for the heartbeat
# timeout while a job runs, the job's group gets TERM, then KILL after the
# grace. When the job exits, whatever it left in its group is reaped too, so a
# finished job never leaves a process holding the GPU. The shell exits when
# stdin ends; while a job runs it lives until the job's group is gone.
IFS= read -r -d '' hb || exit 125
IFS= read -r -d '' grace || exit 125
# A zombie left for a slow init to reap is not alive: look at process states.
alive() {
  ps -A -o pgid= -o stat= 2>/dev/null |
    awk -v g="$pid" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}
reap() {
  kill -TERM -- -"$pid" 2>/dev/null || return 0
  i=0
  while alive; do
    if [ "$i" -ge "$grace" ]; then
      kill -KILL -- -"$pid" 2>/dev/null
      return 0
    fi
    sleep 0.05
    i=$((i + 1))
  done
}
# fd 3 is the coordinator and fd 4 the jobs' stderr. The shell's own stderr is
# silenced so that bash's "Killed" job notices never land in a job's log.
exec 3<&0 4>&2 2>/dev/null </dev/null
while IFS= read -r -d '' -u 3 mark; do
  # Heartbeats sent as the last job ended come first: marks are hex.
  mark=${mark//$'\n'/}
  IFS= read -r -d '' -u 3 wd &&
    IFS= read -r -d '' -u 3 setup &&
    IFS= read -r -d '' -u 3 script &&
    IFS= read -r -d '' -u 3 n || exit 125
  env=()
  while [ "$n" -gt 0 ]; do
    IFS= read -r -d '' -u 3 kv || exit 125
    env+=("$kv")
    n=$((n - 1))
  done
  if [ -n "$setup" ]; then
    script="{ $setup
} || exit \$?
$script"
  fi
  # Job control gives the job a process group of its own.
  set -m
  (
    for kv in "${env[@]}"; do export "$kv"; done
    case $wd in
      "~") wd=$HOME ;;
      "~/"*) wd=$HOME/${wd#"~/"} ;;
    esac
    if [ -n "$wd" ]; then
      cd -- "$wd" || { echo "gpudispatch: cannot enter workdir $wd" >&2; exit 126; }
    fi
    exec "${SHELL:-/bin/bash}" -lc "$script"
  ) 2>&4 4>&- 3<&- &
  pid=$!
  set +m
  (while read -r -t "$hb" -u 3 _; do :; done; reap) >/dev/null 4>&- &
  watcher=$!
  wait "$pid"
  rc=$?
  kill "$watcher"
  wait "$watcher"
  reap
  printf '\0%s' "$mark" >&4
  printf '\0%s %d\n' "$mark" "$rc"
done
