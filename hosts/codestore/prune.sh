# gpudispatch code store: prune, run before store.sh or on its own by
# hosts --clean (see codestore.Clean). It needs $store and $keep.
# open_store reads the store's directory from stdin, in a record ("": the
# default, ~/.gpudispatch/code; a leading ~/ is the home directory), into
# $store, and makes it (0700) unless $1 is "existing"; it fails unless it
# is a directory of this user's, not a link.
open_store() {
  # shellcheck disable=SC2154 # _g_f is set by _g_record (spawn/prelude.sh)
  _g_record && [ "${#_g_f[@]}" = 1 ] || exit 1
  store=${_g_f[0]}
  # shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
  case $store in
  '') store=$_g_d_code ;;
  \~/*) store=$HOME/${store#\~/} ;;
  /*) ;;
  *) store=$HOME/$store ;;
  esac
  if [ ! -d "$store" ]; then
    [ "${1:-}" = existing ] && return 1
    # Another shell may make it at the same moment: then it is there.
    mkdir -p -- "${store%/*}" && { mkdir -m 0700 -- "$store" 2>/dev/null || [ -d "$store" ]; } || exit 1
  fi
  if [ ! -O "$store" ] || [ -L "$store" ]; then
    echo "gpudispatch: $store is not a directory of yours" >&2
    exit 1
  fi
}
# prune removes what no run used for $keep minutes: trees and log dirs'
# working trees whose .ok was not touched (unless a process runs in one),
# the bases not renewed, the blobs no tree links to any more, and what
# cut-off builds left.
# shellcheck disable=SC2154 # $store and $keep are the caller's
# prune_often prunes unless the store was pruned within a tenth of $keep:
# a look at every blob costs, and a run ships to a host many times. The
# time of the last prune is in .pruned (seconds since 1970), read and
# written by bash alone: a process more per shipping costs a lab of
# hosts on one machine.
prune_often() {
  local last='' now
  printf -v now '%(%s)T' -1
  IFS= read -r last <"$store/.pruned" 2>/dev/null
  case $last in '' | *[!0-9]*) last=0 ;; esac
  if [ "$keep" -ge 10 ] && [ $((now - last)) -lt $((keep * 60 / 10)) ]; then
    return 0
  fi
  printf '%s\n' "$now" >"$store/.pruned"
  prune
}
prune() {
  local ok tree
  # The processes' workdirs, once: a tree a process runs in stays, and
  # so does the snapshot of a working tree a process runs in (its content
  # is what a run there would ship again).
  local cwds
  # shellcheck disable=SC2010 # the links' targets, not file names
  cwds=$(ls -l /proc/[0-9]*/cwd 2>/dev/null | grep -F -- " -> $store/")
  find "$store/snaps" -maxdepth 1 -name '*.ok' -mmin +"$keep" 2>/dev/null | while IFS= read -r ok; do
    tree=${ok%.ok}
    grep -qF -- " -> $tree" <<<"$cwds" && continue
    grep -F -- " -> $store/work/" <<<"$cwds" | grep -qF -- "/${tree##*/}" && continue
    rm -f -- "$ok" "$tree.verified" && rm -rf -- "$tree"
  done
  find "$store/work" -mindepth 2 -maxdepth 2 -name '*.ok' -mmin +"$keep" 2>/dev/null | while IFS= read -r ok; do
    tree=${ok%.ok}
    grep -qF -- " -> $tree" <<<"$cwds" && continue
    rm -f -- "$ok" && rm -rf -- "$tree"
  done
  # What cut-off builds left, and the log dirs left with no tree.
  find "$store/work" -mindepth 2 -maxdepth 2 -name '.new.*' -mmin +1440 -exec rm -rf -- {} + 2>/dev/null
  for tree in "$store"/work/*; do
    if [ ! -d "$tree" ] || [ -z "$(find "$tree/last" -mmin +"$keep" 2>/dev/null)" ]; then
      continue
    fi
    compgen -G "$tree/*.ok" >/dev/null || compgen -G "$tree/.new.*" >/dev/null || rm -rf -- "$tree"
  done
  # A base goes with its spare (see store.sh).
  find "$store/base" -maxdepth 1 -name '*.id' ! -name '*.spare.id' -mmin +"$keep" 2>/dev/null | while IFS= read -r ok; do
    ok=${ok%.id}
    rm -f -- "$ok.id" "$ok.spare.id" "$ok.lock" && rm -rf -- "$ok" "$ok.spare" "$ok".work.*
  done
  find "$store/tmp" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf -- {} + 2>/dev/null
  find "$store/blobs" -type f -links 1 -mmin +"$keep" -delete 2>/dev/null
}
