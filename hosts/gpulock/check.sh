# gpudispatch's check of a host's lock dir before a run uses the host, run by
# bash after lockfs.sh, with the lock dir in a record on stdin: exit "$_g_x_unsafe",
# and why on stderr, when another user could redirect the locks made in it.
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
_g_record && [ "${#_g_f[@]}" = 1 ] || exit "$_g_x_unread"
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
lock_dir "${_g_f[0]}" || exit "$_g_x_unsafe"
