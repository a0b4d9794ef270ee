# gpudispatch job wrapper. Run by bash; everything it needs arrives on stdin, so
# the job line reaches the login shell byte for byte with no quoting at all.
#
# stdin: NUL-terminated fields — heartbeat timeout (seconds), grace (50 ms ticks),
# workdir, setup, script, env count N, then N "NAME=value" — then one byte per
# heartbeat. When stdin ends (cancel, timeout, coordinator gone) or stays silent
# for the heartbeat timeout, the job's process group gets TERM, then KILL after
# the grace. When the job exits, whatever it left in its group is reaped too, so
# a finished slot never leaves a process holding the GPU.
IFS= read -r -d '' hb || exit 125
IFS= read -r -d '' grace || exit 125
IFS= read -r -d '' wd || exit 125
IFS= read -r -d '' setup || exit 125
IFS= read -r -d '' script || exit 125
IFS= read -r -d '' n || exit 125
while [ "$n" -gt 0 ]; do
  IFS= read -r -d '' kv || exit 125
  export "$kv"
  n=$((n - 1))
done
case $wd in
  "~") wd=$HOME ;;
  "~/"*) wd=$HOME/${wd#"~/"} ;;
esac
if [ -n "$wd" ]; then
  cd -- "$wd" || { echo "gpudispatch: cannot enter workdir $wd" >&2; exit 126; }
fi
if [ -n "$setup" ]; then
  script="{ $setup
} || exit \$?
$script"
fi
sh=${SHELL:-/bin/bash}
# A zombie left for a slow init to reap is not alive: look at process states.
alive() { ps -o stat= -s "$pid" 2>/dev/null | grep -qv '^Z'; }
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
# fd 4 keeps the job's stderr; the wrapper's own stderr is silenced so that bash's
# "Killed" job notices never land in the job's log.
exec 3<&0 4>&2 2>/dev/null
if command -v setsid >/dev/null; then
  setsid "$sh" -lc "$script" </dev/null 2>&4 4>&- 3<&- &
else
  set -m
  "$sh" -lc "$script" </dev/null 2>&4 4>&- 3<&- &
  set +m
fi
pid=$!
(while read -r -t "$hb" -u 3 _; do :; done; reap) >/dev/null 4>&- &
watcher=$!
wait "$pid"
rc=$?
kill "$watcher"
reap
exit "$rc"
