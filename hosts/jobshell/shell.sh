# gpudispatch job shell. Run by bash on the job's machine, it runs the jobs its
# coordinator sends, one after another. Everything arrives on stdin, so a job
# line reaches the login shell byte for byte with no quoting at all.
#
# stdin: NUL-terminated records — heartbeat timeout (seconds), grace
# (seconds), login ("slot" or "job") — then "h" for each heartbeat, and for each job a record of "j" and
# the byte lengths of its fields, space-separated, followed by the fields with
# nothing between them: end mark, workdir, setup, script, then one
# "NAME=value" per variable. Bash reads a pipe a byte per system call up to a
# delimiter, but a known length in one call: the lengths keep a job's cost
# on the machine down.
#
# Login shells: where the login shell is bash and login is "slot", this shell
# is itself the login shell: it reads the profile once (/etc/profile, then
# the first of ~/.bash_profile, ~/.bash_login, ~/.profile), with no input
# and its output thrown away, and each job is a fork of it. The profile's
# variables stay in this shell as they are; its functions, aliases, options
# and traps are saved aside (through a file removed at once) and put away, so that this script
# runs in a clean shell, and each job's fork takes them back,
# after its own environment (so a profile cannot override
# CUDA_VISIBLE_DEVICES). A fork costs no bash start: the job's $$ is this
# shell's, as in any subshell; its BASHPID, RANDOM and SECONDS are its own.
# A TERM to this shell (a job's "kill $$") goes to the running job. Before
# each job it looks whether one of the profile files, or ~/.bashrc, changed
# since it read them: then it runs nothing, answers "stale" instead of an
# exit status, and exits, and the coordinator sends the job to a new shell.
# Other login shells, and login "job", run "$SHELL -lc" per job. This
# shell's own names start with _g_, and a job sees none of them.
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
# The bootstrap's copy of this code (spawn.Bootstrap) is not the profile's.
unset -v w
IFS= read -r -d '' _g_hb || exit 125
IFS= read -r -d '' _g_grace || exit 125
IFS= read -r -d '' _g_login || exit 125
_g_profiled=
_g_ref=
if [ "$_g_login" = slot ] && [ "${SHELL:-/bin/bash}" != "${SHELL%bash}" ]; then
  _g_profiled=1
  # At the top level, not in a function: the profile's declarations must be
  # global, as in a login shell.
  # shellcheck disable=SC1090,SC1091 # the user's own profile
  {
    if [ -r /etc/profile ]; then . /etc/profile; fi
    if [ -r ~/.bash_profile ]; then
      . ~/.bash_profile
    elif [ -r ~/.bash_login ]; then
      . ~/.bash_login
    elif [ -r ~/.profile ]; then
      . ~/.profile
    fi
  } </dev/null >/dev/null 2>&1
  \builtin shopt -u expand_aliases
  _g_ifs_set=${IFS+1} _g_ifs=${IFS-}
  # What a job's fork takes back: the functions (and which are exported),
  # aliases, options and traps the profile set, in _g_state. They go through
  # a file that is removed at once: its descriptor, _g_ref, stays open for
  # its time, when the profile was read, so that nothing of the shell is
  # left in /tmp however it ends.
  if _g_tmp=$(builtin command mktemp 2>/dev/null); then
    {
      builtin declare -f
      while IFS=' ' builtin read -r _ _g_o _g_f; do
        case $_g_o in -f | "") ;; *) builtin echo "builtin declare $_g_o $_g_f" ;; esac
      done <<<"$(builtin declare -F)"
      builtin alias -p
      builtin set +o
      builtin shopt -p
      builtin trap -p
    } >"$_g_tmp" 2>/dev/null
    exec {_g_ref}<"$_g_tmp"
    builtin command rm -f -- "$_g_tmp"
    IFS= builtin read -r -d '' -u "$_g_ref" _g_state
  fi
  if [ -z "$_g_ref" ]; then
    _g_profiled=
  fi
  # A clean shell for this script, whatever the profile named its functions
  # (a "cd" or a "read") or set.
  while IFS=' ' builtin read -r _ _ _g_f; do builtin unset -f "$_g_f"; done <<<"$(builtin declare -F)"
  builtin unalias -a
  builtin trap - ERR DEBUG RETURN
  builtin trap '_g_forward' TERM
  builtin set +e +u +f +C +o pipefail +o errtrace +o functrace
  IFS=$' \t\n'
fi
# A job's fork closes _g_ref: one is open whatever the login.
[ -n "$_g_ref" ] || exec {_g_ref}</dev/null
# read -N counts characters of the locale; in C, bytes. Jobs get back the
# locale the shell started with (the profile's, where this shell read it).
_g_lc_set=${LC_ALL+1} _g_lc_all=${LC_ALL-}
LC_ALL=C
# A zombie left for a slow init to reap is not alive: look at process states.
_g_alive() {
  ps -A -o pgid= -o stat= 2>/dev/null |
    awk -v g="$_g_pid" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}
# _g_reap stops the group of $_g_pid: TERM, then KILL after the grace. The
# grace is timed by a sleep of its own: the looking costs time on a loaded
# machine.
_g_reap() {
  kill -TERM -- -"$_g_pid" 2>/dev/null || return 0
  sleep "$_g_grace" &
  _g_timer=$!
  while _g_alive; do
    if ! kill -0 "$_g_timer" 2>/dev/null; then
      kill -KILL -- -"$_g_pid" 2>/dev/null
      return 0
    fi
    sleep 0.05
  done
  kill "$_g_timer" 2>/dev/null
}
# _g_stop reaps the running jobs: the shell's children that lead a group. It
# fails once the shell is gone; a zombie is gone (a slow init may reap it
# late).
_g_stop() {
  # shellcheck disable=SC2046 # the pids are meant to be split into words
  set -- $(ps -A -o pid= -o ppid= -o pgid= -o stat= 2>/dev/null | awk -v s="$$" '
    $4 ~ /^Z/ { next }
    $1 == s { up = 1 }
    $2 == s && $1 == $3 { print $1 }
    END { if (!up) print "gone" }')
  for _g_pid; do
    [ "$_g_pid" != gone ] || return 1
    _g_reap
  done
}
_g_watch() {
  local part='' rec rc len n body
  while :; do
    IFS= read -r -d '' -t "$_g_hb" rec
    rc=$?
    if [ "$rc" -gt 128 ]; then
      # Silence. What came of a record is kept for the rest of it.
      part=$part$rec
      _g_stop
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
  while _g_stop; do
    sleep 0.05
  done
}
# _g_forward hands a TERM this shell got to the running job's group: a job
# that kills $$ ends itself, as under bash -lc, not its slot's shell.
_g_forward() {
  [ -z "${_g_pid-}" ] || kill -TERM -- -"$_g_pid" 2>/dev/null
}
# _g_wait waits for the job; a TERM forwarded meanwhile does not end the
# wait.
_g_wait() {
  while :; do
    wait "$_g_pid"
    _g_rc=$?
    if [ "$_g_rc" -le 128 ] || ! kill -0 "$_g_pid" 2>/dev/null; then return; fi
  done
}
# _g_stale reports whether a profile file changed since this shell read it.
_g_stale() {
  local f
  for f in /etc/profile ~/.bash_profile ~/.bash_login ~/.profile ~/.bashrc; do
    [ "$f" -nt "/dev/fd/$_g_ref" ] && return 0
  done
  return 1
}
# This script's functions, which a job's fork puts away.
_g_funcs=$(compgen -A function _g_)
# fd 3 is the watcher and fd 4 the jobs' stderr. The shell's own stderr is
# silenced so that bash's "Killed" job notices never land in a job's log.
exec 4>&2 2>/dev/null
exec 3< <(_g_watch)
exec </dev/null
while IFS= read -r -d '' -u 3 _g_rec; do
  # shellcheck disable=SC2086 # the lengths are meant to be split into words
  set -- ${_g_rec#j}
  IFS= read -r -N "$1" -u 3 _g_mark &&
    IFS= read -r -N "$2" -u 3 _g_wd &&
    IFS= read -r -N "$3" -u 3 _g_setup &&
    IFS= read -r -N "$4" -u 3 _g_script || exit 125
  shift 4
  _g_env=()
  for _g_len; do
    IFS= read -r -N "$_g_len" -u 3 _g_kv || exit 125
    _g_env+=("$_g_kv")
  done
  if [ -n "$_g_profiled" ] && _g_stale; then
    printf '\0%s' "$_g_mark" >&4
    printf '\0%s stale\n' "$_g_mark"
    exit 0
  fi
  if [ -n "$_g_setup" ]; then
    _g_script="{ $_g_setup
} || exit \$?
$_g_script"
  fi
  # Job control gives the job a process group of its own.
  set -m
  (
    if [ -n "$_g_lc_set" ]; then LC_ALL=$_g_lc_all; else unset -v LC_ALL; fi
    # shellcheck disable=SC2163 # each entry is NAME=value
    for _g_kv in "${_g_env[@]}"; do export "$_g_kv"; done
    # shellcheck disable=SC2088 # a literal ~ from the inventory means $HOME
    case $_g_wd in
      "~") _g_wd=$HOME ;;
      "~/"*) _g_wd=$HOME/${_g_wd#"~/"} ;;
    esac
    if [ -n "$_g_wd" ]; then
      builtin cd -- "$_g_wd" || { echo "gpudispatch: cannot enter workdir $_g_wd" >&2; exit 126; }
    fi
    [ -n "$_g_profiled" ] || exec "${SHELL:-/bin/bash}" -lc "$_g_script"
    # The login shell's fork: what the profile set, the job's own
    # BASHPID-seeded RANDOM and SECONDS from 0, then the job as bash -lc
    # would run it: $0 bash (bash 5), no positional parameters, none of
    # this script's names.
    if [ -n "$_g_ifs_set" ]; then IFS=$_g_ifs; else unset -v IFS; fi
    # shellcheck disable=SC2016 # the job line's own text
    case $_g_script in
      *'$$'* | *'${$}'*)
        # A job that names $$ gets a bash of its own, so that $$ is its own
        # (to kill itself, or to name its files): it takes up the profile's
        # variables from here, the rest from what was saved, then the job's
        # environment again.
        _g_vars=$(
          builtin unset -v RANDOM SRANDOM SECONDS LINENO HISTCMD EPOCHSECONDS EPOCHREALTIME \
            BASH_ARGV BASH_ARGC BASH_SOURCE BASH_LINENO FUNCNAME BASH_COMMAND BASH_ARGV0 \
            BASH_EXECUTION_STRING BASH_SUBSHELL BASHPID PIPESTATUS PWD OLDPWD SHLVL _ "${!_g_@}" 2>/dev/null
          builtin declare -p
        )
        # shellcheck disable=SC2016 # expanded by the job's bash
        exec "${SHELL:-/bin/bash}" --noprofile --norc -c 'builtin eval "$1" 2>/dev/null
builtin eval "$2" 2>/dev/null
_g_s=$3
builtin shift 3
for _g_kv; do builtin export "$_g_kv"; done
builtin unset -v _g_kv
builtin set --
builtin eval "builtin unset -v _g_s; $_g_s"' bash "$_g_vars" "$_g_state" "$_g_script" "${_g_env[@]}"
        ;;
    esac
    RANDOM=$BASHPID${EPOCHREALTIME//[!0-9]/} SECONDS=0 BASH_ARGV0=bash
    set -- "$_g_state"
    builtin eval "builtin unset -f ${_g_funcs//$'\n'/ }; builtin unset -v ${!_g_*}; builtin eval \"\$1\" 2>/dev/null; builtin set --
$_g_script"
  ) 2>&4 4>&- 3<&- {_g_ref}<&- &
  _g_pid=$!
  set +m
  _g_wait
  _g_reap
  _g_pid= # a TERM between jobs has no job to go to
  printf '\0%s' "$_g_mark" >&4
  printf '\0%s %d\n' "$_g_mark" "$_g_rc"
done
