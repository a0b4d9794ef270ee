# gpudispatch GPU lock holder: one per machine and run, it holds the
# locks of the run's GPUs there. Run by bash, after lockkey.sh.
#
# stdin: NUL-terminated fields — lock dir, run id, owner (one line), heartbeat
# timeout (seconds), linger (seconds) — then lines: "lock N", "release N",
# "exit", or an empty line as a heartbeat. GPU N's lock file is named by its
# UUID as the login shell's nvidia-smi reports it, else "index-N"; the holder
# takes an exclusive flock on it and writes its owner and its own pid into it.
#
# stdout: a line per request, "locked N KEY", "busy N KEY OWNER" when another
# run holds the lock, "failed N WHY", or "released N". Exit 127 when flock(1)
# is missing. Told "exit", the holder lets go of everything at once. One whose
# coordinator went silent (stdin ended or no heartbeat for the timeout) keeps
# its locks for the linger time, in which the job shells of that coordinator,
# which stopped hearing it at the same time, have killed their jobs; then it
# exits, and the locks die with it. A holder of the same run that finds such a
# lingering holder (its run lost the connection and came back) takes the
# lock over: the jobs it covers are the run's own.
# shellcheck disable=SC2154 # $key is set by lock_key, from lockkey.sh sent first
IFS= read -r -d '' dir || exit 125
IFS= read -r -d '' run || exit 125
IFS= read -r -d '' owner || exit 125
IFS= read -r -d '' hb || exit 125
IFS= read -r -d '' linger || exit 125
command -v flock >/dev/null || exit 127
uuids=$("${SHELL:-/bin/bash}" -lc 'nvidia-smi --query-gpu=index,uuid --format=csv,noheader' 2>/dev/null </dev/null)
umask 0
# The directory is shared by every user of the host: world-writable, sticky.
if [ ! -d "$dir" ] && mkdir -p -- "$dir" 2>/dev/null; then
  chmod 1777 -- "$dir" 2>/dev/null
fi
fds=() # by GPU index: the open lock file of each GPU held
# take locks GPU $1 and says how it went.
take() {
  lock_key "$1" "$uuids"
  local file=$dir/$key fd who holder taken
  # A lock file another user made without write permission is still lockable.
  if ! { exec {fd}<>"$file"; } 2>/dev/null && ! { exec {fd}<"$file"; } 2>/dev/null; then
    printf 'failed %s cannot open %s\n' "$1" "$file"
    return
  fi
  if ! flock -n -x "$fd"; then
    { IFS= read -r who; IFS= read -r holder; } <"$file"
    taken=
    case $who in
      "run $run "*)
        # $0 is the holders' process name (gpulock.ProcessName).
        if ps -o args= -p "$holder" 2>/dev/null | grep -q -e "^bash -c .* $0\$"; then
          kill "$holder" 2>/dev/null
          flock -w 10 -x "$fd" && taken=1
        fi
        ;;
    esac
    if [ -z "$taken" ]; then
      exec {fd}<&-
      printf 'busy %s %s %s\n' "$1" "$key" "${who:-another process}"
      return
    fi
  fi
  { printf '%s\n%s\n' "$owner" "$$" >"$file"; } 2>/dev/null
  fds[$1]=$fd
  printf 'locked %s %s\n' "$1" "$key"
}
while IFS= read -r -t "$hb" line; do
  case $line in
    "lock "*) take "${line#lock }" ;;
    "release "*)
      g=${line#release }
      if [ -n "${fds[g]-}" ]; then
        fd=${fds[g]}
        exec {fd}<&-
        unset 'fds[g]'
      fi
      printf 'released %s\n' "$g"
      ;;
    exit) exit 0 ;;
  esac
done
# Linger in a child that holds no lock, so that a takeover's kill of this
# shell frees them at once.
(
  for fd in "${fds[@]}"; do exec {fd}<&-; done
  exec sleep "$linger"
) </dev/null >/dev/null 2>&1 &
wait $!
