# gpudispatch job shell. Run by bash on the job's machine, it runs the jobs its
# coordinator sends, one after another. Everything arrives on stdin, so a job
# line reaches the login shell byte for byte with no quoting at all.
#
# stdin: NUL-terminated records — heartbeat timeout (seconds), grace
# (seconds) — then "h" for each heartbeat, and for each job a record of "j" and
# the byte lengths of its fields, space-separated, followed by the fields with
# nothing between them: end mark, workdir, setup, script, then one
# "NAME=value" per variable. Bash reads a pipe a byte per system call up to a
# delimiter, but a known length in one call: the lengths keep a job's cost
# on the machine down.
#
# Each job runs in a subshell of its own (its environment and workdir go with
# it) and a process group of its own, with the shell's stdout and stderr. Once
# the job and its group are gone, the shell writes NUL and the end mark on
# stderr, then NUL, the end mark, a space, the exit status and a newline on
# stdout: the coordinator splits the streams there. The mark is new for each
# job and never in a job's environment, so a job cannot end its own output.
#
# A watcher, forked once, reads stdin and hands the jobs on. When stdin ends
# (cancel, coordinator gone) or stays silent for the heartbeat timeout, it gives
# the running job's group TERM, then KILL after the grace. When a job exits,
# whatever it left in its group is reaped too, so a finished job never leaves a
# process holding the GPU. The shell exits when stdin ends; while a job runs it
# lives until the job's group is gone.
IFS= read -r -d '' hb || exit 125
IFS= read -r -d '' grace || exit 125
# read -N counts characters of the locale; in C, bytes. Jobs get back the
# locale the shell started with.
lc_set=${LC_ALL+1} lc_all=${LC_ALL-}
LC_ALL=C
# A zombie left for a slow init to reap is not alive: look at process states.
alive() {
  ps -A -o pgid= -o stat= 2>/dev/null |
    awk -v g="$pid" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}
# reap stops the group of $pid: TERM, then KILL after the grace. The grace is
# timed by a sleep of its own: the looking costs time on a loaded machine.
reap() {
  kill -TERM -- -"$pid" 2>/dev/null || return 0
  sleep "$grace" &
  timer=$!
  while alive; do
    if ! kill -0 "$timer" 2>/dev/null; then
      kill -KILL -- -"$pid" 2>/dev/null
      return 0
    fi
    sleep 0.05
  done
  kill "$timer" 2>/dev/null
}
# stop reaps the running jobs: the shell's children that lead a group. It
# fails once the shell is gone; a zombie is gone (a slow init may reap it late).
stop() {
  # shellcheck disable=SC2046 # the pids are meant to be split into words
  set -- $(ps -A -o pid= -o ppid= -o pgid= -o stat= 2>/dev/null | awk -v s="$$" '
    $4 ~ /^Z/ { next }
    $1 == s { up = 1 }
    $2 == s && $1 == $3 { print $1 }
    END { if (!up) print "gone" }')
  for pid; do
    [ "$pid" != gone ] || return 1
    reap
  done
}
watch() {
  part=
  while :; do
    IFS= read -r -d '' -t "$hb" rec
    rc=$?
    if [ "$rc" -gt 128 ]; then
      # Silence. What came of a record is kept for the rest of it.
      part=$part$rec
      stop
      continue
    fi
    [ "$rc" -eq 0 ] || break
    rec=$part$rec
    part=
    case $rec in
      j*)
        # No job runs while its fields arrive: no timeout.
        n=0
        for len in ${rec#j}; do n=$((n + len)); done
        IFS= read -r -N "$n" body || break
        printf '%s\0%s' "$rec" "$body"
        ;;
    esac
  done
  # stdin ended: no job may run on. One may be starting from fields already
  # handed on, so stop until the shell, which sees the end once this watcher
  # has closed its side, is gone.
  exec >/dev/null
  while stop; do
    sleep 0.05
  done
}
# fd 3 is the watcher and fd 4 the jobs' stderr. The shell's own stderr is
# silenced so that bash's "Killed" job notices never land in a job's log.
exec 4>&2 2>/dev/null
exec 3< <(watch)
exec </dev/null
while IFS= read -r -d '' -u 3 rec; do
  # shellcheck disable=SC2086 # the lengths are meant to be split into words
  set -- ${rec#j}
  IFS= read -r -N "$1" -u 3 mark &&
    IFS= read -r -N "$2" -u 3 wd &&
    IFS= read -r -N "$3" -u 3 setup &&
    IFS= read -r -N "$4" -u 3 script || exit 125
  shift 4
  env=()
  for len; do
    IFS= read -r -N "$len" -u 3 kv || exit 125
    env+=("$kv")
  done
  if [ -n "$setup" ]; then
    script="{ $setup
} || exit \$?
$script"
  fi
  # Job control gives the job a process group of its own.
  set -m
  (
    # Unset before, LC_ALL=C is not exported: only a set one needs mending.
    [ -z "$lc_set" ] || LC_ALL=$lc_all
    # shellcheck disable=SC2163 # each entry is NAME=value
    for kv in "${env[@]}"; do export "$kv"; done
    # shellcheck disable=SC2088 # a literal ~ from the inventory means $HOME
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
  wait "$pid"
  rc=$?
  reap
  printf '\0%s' "$mark" >&4
  printf '\0%s %d\n' "$mark" "$rc"
done
