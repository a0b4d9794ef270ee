# gpudispatch's look at GPU locks (gpudispatch hosts), run by bash after
# lockkey.sh with the lock dir and GPU indices as its arguments. It prints
# "INDEX OWNER" for each GPU whose lock some run holds. It only tries a
# shared lock and lets go of it at once, so it never stands in a run's way.
# shellcheck disable=SC2154 # $key is set by lock_key, from lockkey.sh sent first
command -v flock >/dev/null || exit 0
d=$1
shift
uuids=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null)
for i in "$@"; do
  lock_key "$i" "$uuids"
  f=$d/$key
  [ -e "$f" ] || continue
  exec 9<"$f" || continue
  flock -n -s 9 || printf '%s %s\n' "$i" "$(head -n 1 "$f")"
  exec 9<&-
done
