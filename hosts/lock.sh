# gpudispatch GPU lock holder (SPEC §6). Run by bash; its fields arrive on stdin.
#
# stdin: NUL-terminated fields — lock dir, GPU index, run id, owner (one line),
# heartbeat timeout (seconds), linger (seconds) — then one line per heartbeat, or
# the line "release". The GPU's lock file is named by its UUID as the login
# shell's nvidia-smi reports it, else "index-N"; the holder takes an exclusive
# flock on it and writes its owner and its own pid into it.
#
# stdout: "locked KEY", or "busy KEY OWNER" (exit 75) when another run holds the
# lock; exit 127 when flock(1) is missing. A holder told "release" lets go at
# once. One whose coordinator went silent (stdin ended or no heartbeat for the
# timeout) keeps the lock for the linger time, in which the wrappers of that
# coordinator's jobs, which stopped hearing it at the same time, have killed
# them; then it exits, and the lock dies with it. A holder of the same run that
# finds such a lingering holder (its run lost the connection and came back)
# takes the lock over: the jobs it covers are the run's own.
IFS= read -r -d '' dir || exit 125
IFS= read -r -d '' gpu || exit 125
IFS= read -r -d '' run || exit 125
IFS= read -r -d '' owner || exit 125
IFS= read -r -d '' hb || exit 125
IFS= read -r -d '' linger || exit 125
command -v flock >/dev/null || exit 127
# lock_key comes from lockkey.sh, sent ahead of this script.
uuids=$("${SHELL:-/bin/bash}" -lc 'nvidia-smi --query-gpu=index,uuid --format=csv,noheader' 2>/dev/null </dev/null)
key=$(lock_key "$gpu" "$uuids")
umask 0
# The directory is shared by every user of the host: world-writable, sticky.
if [ ! -d "$dir" ] && mkdir -p -- "$dir" 2>/dev/null; then
  chmod 1777 -- "$dir" 2>/dev/null
fi
file=$dir/$key
# A lock file another user made without write permission is still lockable.
{ exec 9<>"$file"; } 2>/dev/null || exec 9<"$file" || exit 126
if ! flock -n -x 9; then
  { IFS= read -r who; IFS= read -r holder; } <"$file"
  taken=
  case $who in
    "run $run "*)
      if ps -o args= -p "$holder" 2>/dev/null | grep -q '^bash -c .* gpudispatch-lock$'; then
        kill "$holder" 2>/dev/null
        flock -w 10 -x 9 && taken=1
      fi
      ;;
  esac
  if [ -z "$taken" ]; then
    printf 'busy %s %s\n' "$key" "${who:-another process}"
    exit 75
  fi
fi
{ printf '%s\n%s\n' "$owner" "$$" >"$file"; } 2>/dev/null
printf 'locked %s\n' "$key"
while IFS= read -r -t "$hb" line; do
  [ "$line" = release ] && exit 0
done
# Linger in a child that does not hold the lock, so that a takeover's kill
# of this shell frees it at once.
sleep "$linger" 9>&- </dev/null >/dev/null 2>&1 &
wait $!
