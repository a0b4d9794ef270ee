# The layout of a lock directory, shared by lock.sh, probe.sh and check.sh
# (each is sent after this file). Other users of the host may be hostile:
# nothing here writes into, reads from or follows a path that another user
# could have made, and every pid it acts on is proven first.
#
# In DIR (root's or the user's own; sticky if every user may write in it),
# user U's lock on the GPU named KEY is the directory DIR/gpudispatch-gpu-KEY.U,
# made by U (mkdir never follows a link) and never written into. A holder
# takes flock(2) on it through a descriptor of the directory itself, opened
# from inside it after checking where it is, so that no link or FIFO put in
# its place is ever opened. Nobody but U and root can remove U's directory,
# so a lock cannot be pulled from under its holder. A GPU is locked by a
# holder when it holds its own user's directory and no other user's is held.
# Who holds it is in the names of the empty directories
# DIR/gpudispatch-held-KEY~PID~RUN~WHO~CPID that each holder (pid PID, of run
# RUN of WHO, coordinator pid CPID) makes and removes itself.

# shellcheck disable=SC2154,SC2034 # holder is set by the script sent after this one; key, pdir, lfd and why are set for it

# lock_key GPU INDEX_UUID_LINES sets key to the name of GPU's lock: the
# UUID the driver gives its GPU-th GPU in bus order (the index nvidia-smi
# gives it, and CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID), from
# /proc/driver/nvidia/gpus/BUS/information ($GPUDISPATCH_NVIDIA_PROC for
# tests), so that a GPU's lock has the same name whether or not nvidia-smi
# answers (a driver in a bad state, a GPU fallen off the bus); else its
# UUID from nvidia-smi's "index, uuid" lines; else index-GPU; with anything
# but letters, digits, '.', '_' and '-' made '_'. It starts no process: a
# lock costs the machine one flock(1).
lock_key() {
  key=index-$1
  local i uuid='' rest f line n=0 LC_COLLATE=C
  for f in "${GPUDISPATCH_NVIDIA_PROC:-/proc/driver/nvidia}"/gpus/*/information; do
    [ -r "$f" ] || continue
    if [ "$n" = "$1" ]; then
      while IFS= read -r line; do
        case $line in "GPU UUID:"*)
          uuid=${line#GPU UUID:}
          uuid=${uuid//[[:space:]]/}
          ;;
        esac
      done <"$f"
      break
    fi
    n=$((n + 1))
  done
  case $uuid in GPU-*) ;; *) uuid= ;; esac
  if [ -n "$uuid" ]; then
    key=$uuid
  else
    while IFS=', ' read -r i uuid rest; do
      if [ "$i" = "$1" ] && [ -n "$uuid" ]; then
        key=$uuid
        break
      fi
    done <<END
$2
END
  fi
  key=${key//[!A-Za-z0-9._-]/_}
}

# lock_dir DIR makes DIR when it is missing (mode 1777: every user of the
# host locks there) and checks that no other user can redirect what is made
# in it: neither it nor a directory above it is a directory that a user but
# root and this one owns, or that everyone may write in without the sticky
# bit; DIR itself is no symbolic link. It sets pdir to DIR's physical path,
# or says why not on stderr and fails.
lock_dir() {
  local d=$1 p bad
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then
    mkdir -p -- "$(dirname -- "$d")" 2>/dev/null
    mkdir -m 1777 -- "$d" 2>/dev/null
  fi
  if [ -L "$d" ] || [ ! -d "$d" ]; then
    # shellcheck disable=SC2012 # ls -ld is what a user reads, and portable
    printf 'gpudispatch: lock dir %s is not a directory but %s: remove it, or use another --lock-dir\n' "$d" "$(ls -ld -- "$d" 2>&1)" >&2
    return 1
  fi
  pdir=$(cd -P -- "$d" && pwd -P) || return 1
  # The directories from pdir up to /, without a process per level.
  set --
  p=$pdir
  while [ -n "$p" ]; do
    set -- "$@" "$p"
    p=${p%/*}
  done
  [ "$pdir" = / ] || set -- "$@" /
  bad=$(find "$@" -maxdepth 0 \( \( ! -uid 0 ! -uid "$EUID" \) -o \( -perm -0002 ! -perm -1000 \) \) -print 2>/dev/null)
  bad=${bad%%$'\n'*}
  if [ -n "$bad" ]; then
    # shellcheck disable=SC2046,SC2012 # the words of ls -ld: mode, links, owner
    set -- $(ls -ld -- "$bad")
    printf 'gpudispatch: lock dir %s: %s is owned by %s with mode %s, so another user could redirect the GPU locks: use a lock dir that root or you own, sticky if every user may write in it (mkdir -m 1777 DIR as root, or --lock-dir), or remove %s\n' "$d" "$bad" "$3" "$1" "$bad" >&2
    return 1
  fi
}

# open_lock PATH opens the lock directory PATH as lfd without following
# anything put in its place, or sets why and fails.
open_lock() {
  local e=$1
  if [ -L "$e" ] || [ ! -d "$e" ] || ! cd -P -- "$e" 2>/dev/null; then
    # shellcheck disable=SC2012
    why="$(ls -ld -- "$e" 2>&1) is in the place of a lock directory"
    return 1
  fi
  # cd -P leaves the physical path in PWD: no process to ask where it is.
  if [ "$PWD" != "$e" ] || ! { exec {lfd}<.; } 2>/dev/null; then
    cd / || return 1
    why="$e moved while it was opened"
    return 1
  fi
  cd / || return 1
}

# holders KEY prints who holds the lock of KEY, from the records of live
# holders: "run RUN of WHO (pid CPID)", and when the holder's coordinator is
# gone (its record ends in "~gone") that its jobs run on without it; $holder
# is the holders' process name.
holders() {
  local rec hpid hrun hwho hcpid out=
  for rec in "$pdir/gpudispatch-held-$1~"*; do
    IFS='~' read -r _ hpid hrun hwho hcpid <<<"${rec##*/}"
    case $hpid in '' | *[!0-9]*) continue ;; esac
    ps -o args= -p "$hpid" 2>/dev/null | grep -q -e " $holder $hrun\$" || continue
    case $hcpid in
      *~gone) out+="${out:+, }run $hrun of $hwho (pid ${hcpid%~gone}, which is gone: a job of that run runs on there with no gpudispatch; gpudispatch hosts lists it)" ;;
      *) out+="${out:+, }run $hrun of $hwho (pid $hcpid)" ;;
    esac
  done
  printf '%s' "${out:-a process that is not a gpudispatch run}"
}

# others_held KEY [turn] succeeds when another user's lock of KEY is
# held. Two users taking a GPU at once each see the other's held: the
# lower uid waits a moment for the higher one, which backs off at once;
# with "turn" (a GPU taken for a turn, looked at each second) it waits for
# none, and both may back off, to try again.
others_held() {
  local e u
  for e in "$pdir/gpudispatch-gpu-$1".*; do
    u=${e##*.}
    [ "$u" = "$EUID" ] && continue
    open_lock "$e" || continue # not a lock: nobody can hold it
    if flock -n -s "$lfd" || { [ "${2-}" != turn ] && [[ $u =~ ^[0-9]+$ ]] && ((u > EUID)) && flock -w 1 -s "$lfd"; }; then
      exec {lfd}<&-
      continue
    fi
    exec {lfd}<&-
    return 0
  done
  return 1
}

# host_key sets here to the name a host's records of waiting go by (fair
# share, see lock.sh), for the GPUs nvidia-smi listed in $1: the lock name
# of its first GPU, or index-0 where it listed none.
host_key() {
  local i rest
  here=index-0
  while IFS=', ' read -r i rest; do
    case $i in '' | *[!0-9]*) continue ;; esac
    lock_key "$i" "$1"
    here=$key
    return 0
  done <<<"$1"
}
