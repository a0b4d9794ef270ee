# gpudispatch's check of a host's lock dir before a run uses the host, run by
# bash after lockfs.sh, with the lock dir NUL-terminated on stdin: exit "$_g_x_unsafe",
# and why on stderr, when another user could redirect the locks made in it.
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
IFS= read -r -d '' d || exit "$_g_x_unread"
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
lock_dir "$d" || exit "$_g_x_unsafe"
