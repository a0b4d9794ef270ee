# gpudispatch's look at GPU locks (gpudispatch hosts), run by bash after
# lockfs.sh with the lock dir, the holders' process name and the GPU indices
# as its arguments. It writes a record (spawn.Record) of INDEX and WHO for
# each GPU whose lock some run holds, then "waits", WHO, its place in the
# line ("-" for a parked part, out of it) and what its first job needs (N
# GPUs, "p" after it for a part of a job over several hosts) for each run
# that waits for the host's GPUs (fair share, see lock.sh), first in the
# line first. It only tries shared locks and lets go of them at once, so it never
# stands in a run's way, and makes nothing: a missing lock dir holds no lock.
# shellcheck disable=SC2154,SC2034 # key, pdir and lfd are set by lockfs.sh, which reads holder
command -v flock >/dev/null || exit 0
d=$1
holder=$2
shift 2
[ -d "$d" ] || exit 0
lock_dir "$d" || exit "$_g_x_unsafe"
uuids=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null)
for i in "$@"; do
  lock_key "$i" "$uuids"
  for e in "$pdir/gpudispatch-gpu-$key".*; do
    open_lock "$e" || continue
    if ! flock -n -s "$lfd"; then
      _g_send "$i" "$(holders "$key")"
      exec {lfd}<&-
      break
    fi
    exec {lfd}<&-
  done
done
host_key "$uuids"
# The runs that wait, in the line's order (their records' times), each
# with its place and what its first job needs.
n=0
while IFS=' ' read -r _ e; do
  IFS='~' read -r _ wpid wrun wwho wneed _ wpark _ <<<"$e"
  case $wpid in '' | *[!0-9]*) continue ;; esac
  [ -d "/proc/$wpid" ] || continue
  if [ "$wpark" = parked ]; then
    _g_send waits "run $wrun of $wwho" - "${wneed:-1}"
    continue
  fi
  n=$((n + 1))
  _g_send waits "run $wrun of $wwho" "$n" "${wneed:-1}"
done < <(find "$pdir" -mindepth 1 -maxdepth 1 -name "gpudispatch-want-$here~*" -printf '%T@ %f\n' 2>/dev/null | sort -n)
