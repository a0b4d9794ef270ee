# lock_key GPU INDEX_UUID_LINES prints the name of GPU's lock file: its UUID
# from nvidia-smi's "index, uuid" lines, else index-GPU, with anything but
# letters, digits, '.', '_' and '-' made '_'. lock.sh and the lock probe of
# `gpudispatch hosts` both use it, so that they name the same file.
lock_key() {
  _uuid=$(printf '%s\n' "$2" | awk -F', *' -v i="$1" '$1 == i { print $2; exit }')
  printf '%s' "${_uuid:-index-$1}" | tr -c 'A-Za-z0-9._-' _
}
