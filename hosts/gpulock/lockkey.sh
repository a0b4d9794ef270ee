# lock_key GPU INDEX_UUID_LINES sets key to the name of GPU's lock file: its
# UUID from nvidia-smi's "index, uuid" lines, else index-GPU, with anything but
# letters, digits, '.', '_' and '-' made '_'. lock.sh and the lock probe of
# `gpudispatch hosts` both use it, so that they name the same file. It is
# bash, and starts no process: a lock costs the machine one flock(1).
lock_key() {
  key=index-$1
  local i uuid rest
  while IFS=', ' read -r i uuid rest; do
    if [ "$i" = "$1" ] && [ -n "$uuid" ]; then
      key=$uuid
      break
    fi
  done <<END
$2
END
  key=${key//[!A-Za-z0-9._-]/_}
}
