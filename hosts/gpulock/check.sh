# gpudispatch's check of a host's lock dir before a run uses the host, run by
# bash after lockfs.sh, with the lock dir NUL-terminated on stdin: exit 126,
# and why on stderr, when another user could redirect the locks made in it.
IFS= read -r -d '' d || exit 125
lock_dir "$d" || exit 126
