# gpudispatch code store. Run by bash on a machine, it builds a snapshot's
# tree in the user's content store, by default ~/.gpudispatch/code (0700):
#   blobs/XX/HASH[x]  the content of files, by hash (x: executable),
#                     read-only, shared by hard links;
#   snaps/ID/         a snapshot's tree, whose files are links to blobs:
#                     no job runs in it;
#   snaps/ID.ok       there once the tree is whole; touched at each use;
#   snaps/ID.verified when its blobs were last checked (make_work_spare);
#   work/LOG/ID/      log dir LOG's working tree of snapshot ID, where its
#                     jobs run: copies of the blobs, never links to them,
#                     so nothing a job does there, as root or not, reaches
#                     the store or another log dir's tree (see worktree);
#   work/LOG/ID.ok    there once it is whole; touched at each use;
#   work/LOG/last     the ID of LOG's last tree built;
#   base/KEY.work.ID/ a clean copy of snapshot ID of directory KEY (its
#                     last), made after the answer: the next working tree
#                     of any log dir of KEY starts as it (see worktree);
#   .unshared         there once no job can reach a blob (see check_blobs);
#   .damaged          what drop_blobs found, for the next shell to say;
#   base/KEY/         a copy of the last tree built of the directory KEY
#   base/KEY.id       names, which no job touches: the next tree of that
#                     directory is made from it by its differences;
#   base/KEY.spare/   a second copy of it, made after the answer (its id
#   base/KEY.spare.id in KEY.spare.id), so that the next build finds two:
#                     one becomes the new tree, the other the new base,
#                     and neither is copied while the coordinator waits;
#   base/KEY.lock     flock(1) on it guards base/KEY* (without a lock, no
#                     spare is made, and each build copies the base).
# It runs after prune.sh, which defines prune and open_store.
# stdin, after this code, in records (spawn.Record): the store's directory
# (see open_store), then ID, KEY, KEEP and LOG (KEEP: minutes, see prune;
# LOG: the log dir's key). It answers in records too (_g_send): first maybe
# "warn" TEXT, then "have" STORE when the tree is there (and LOG's working
# tree of it, made now if need be), and is done. Else "need" STORE TMP
# BASE (the ID of base/KEY, or "-"); then it reads a record of four
# fields: the base to use ("-" for none), the paths the base has that the
# tree has not (one per line), the paths of the tree's changed files (one
# per line; none when the base is "-"), the names of the blobs the changed
# files need (one per line). It answers "lacks" and the names of those the
# store lacks (one per line), "into" and the directories to build the tree
# in, "newbase" DIR where it wants the tree's new base, then "end". Then it
# reads a tar stream it extracts in STORE (its names are relative to it):
# TMP/new/XX/BLOB for the blobs it lacked, and in each DIR the tree's
# changed files as hard links to blobs (in blobs/, or in TMP/new), its
# links, and their directories; for a newbase DIR, a file DIR.tar that
# holds the whole tree in DIR, as links to blobs/; and last an empty
# TMP/end (a stream cut between two entries is a whole one to tar). Once
# tar succeeded, the tree becomes snaps/ID, LOG's working tree of it is
# made, and the shell says "built".
# It closes its output then, puts the new blobs in the store, makes the new
# base from DIR.tar, makes the spare and prunes (see after_answer): the
# coordinator does not wait for that. A build from the base with a spare,
# under the lock, is done in place: the differences go into both (DIR:
# base/KEY.spare and base/KEY), the spare becomes the tree, the base stays
# the base: nothing is copied while the coordinator waits. Else the tree is
# built in TMP (DIR: TMP/tree), whole or from the base, taken by a rename,
# and the new base (TMP/spare) is made after the answer: written once,
# not twice, while the coordinator waits, and never copied from the tree,
# where jobs may already write.
# Exit status 3: another build of the directory replaced its base before
# this one could take it, and the coordinator asks again.
set -u
umask 077
# Bytes, not characters: paths hold any bytes, and sort and comm must
# agree on their order.
export LC_ALL=C
open_store
# A store made just now lacks every blob: it is not asked.
new_store=''
# shellcheck disable=SC2154 # set by open_store
if [ ! -d "$store/base" ]; then
  mkdir -p -- "$store/blobs" "$store/snaps" "$store/tmp" "$store/base" "$store/work" || exit 1
  : >"$store/.unshared"
  new_store=1
fi
_g_record && [ "${#_g_f[@]}" = 4 ] || exit 1
id=${_g_f[0]} key=${_g_f[1]} keep=${_g_f[2]} log=${_g_f[3]}
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
case $id$key$log in '' | *[!0-9a-f]*) exit "$_g_x_usage" ;; esac
case $keep in '' | *[!0-9]*) exit "$_g_x_usage" ;; esac
[ -n "$log" ] || exit "$_g_x_usage"
snap=$store/snaps/$id
b=$store/base/$key
wt=$store/work/$log/$id
# each runs its arguments with the lines of $1 (which ends with a newline)
# after them: at once when they are few, through xargs when they might not
# fit on a command line.
each() {
  local list=${1%$'\n'} a
  shift
  [ -n "$list" ] || return 0
  if [ "${#list}" -lt 65536 ]; then
    mapfile -t a <<<"$list"
    "$@" "${a[@]}"
  else
    xargs -d '\n' "$@" <<<"$list"
  fi
}
# check_blobs runs once on a store that an earlier gpudispatch made, whose
# jobs ran in trees of links to the blobs and could change them (root, or
# after a chmod): a blob whose content is no longer its hash goes (see
# drop_blobs), and the shell says so. From then on no job reaches a blob:
# their trees are copies (see worktree); and each snapshot's blobs are
# checked again as its spare copy is made (see make_work_spare).
check_blobs() {
  local bad
  bad=$(cd -- "$store/blobs" && find . -type f -name '[0-9a-f]*' -print0 | xargs -0 -r sha256sum -- |
    awk '{ n = $2; sub(/.*\//, "", n); sub(/x$/, "", n); if (n != $1) print $2 }') || return 1
  if [ -n "$bad" ]; then
    drop_blobs "$bad" "had been changed by jobs of an earlier gpudispatch (their trees were links to it)" || return 1
  fi
  mkdir -p -- "$store/work" && : >"$store/.unshared"
}
# drop_blobs removes the blobs $1 names (./XX/NAME, one per line), whose
# content is no longer their hash, and every snapshot tree's mark and
# every base and spare (they are links to, or copies of, the same
# content), so that the next build ships them again; it leaves the
# warning, saying why ($2), in .damaged for the next shell to say.
drop_blobs() {
  local n
  n=$(wc -l <<<"$1")
  (cd -- "$store/blobs" && each "$1"$'\n' rm -f --) || return 1
  rm -f -- "$store"/snaps/*.ok
  rm -rf -- "$store"/base/*
  printf '%s\n' "$n files of the content store in $store $2: removed, and shipped again" >>"$store/.damaged"
}
[ -e "$store/.unshared" ] || check_blobs || exit 1
if [ -s "$store/.damaged" ]; then
  while IFS= read -r line; do
    _g_send warn "$line"
  done <"$store/.damaged"
  rm -f -- "$store/.damaged"
fi
# worktree makes $wt, log dir LOG's working tree of snapshot ID, unless it
# is there, and renews it (see prune). Jobs run there, never in snaps/ID:
# its files are copies of the blobs (reflinks where the filesystem has
# them), so nothing a job does to them reaches the store or another log
# dir's tree. It starts as a clean copy of the snapshot: the directory's
# spare copy (base/KEY.work.SID, made after an earlier answer, off the
# run's path) taken by a rename and changed into ID by the two snapshots'
# differences, or else a copy made now. What LOG's jobs wrote in its last
# tree (checkpoints, outputs: --resume finds them) joins it as hard links;
# a shipped file a job changed there does not: the tree has the snapshot's.
worktree() {
  local w=$store/work/$log prev='' new
  if [ -e "$wt.ok" ]; then
    touch -- "$wt.ok"
    return 0
  fi
  mkdir -p -- "$w" || return 1
  new=$w/.new.${HOSTNAME:-host}.$$.$RANDOM
  if ! take_spare "$new"; then
    rm -rf -- "$new" "$new.lists"
    cp -R -P --preserve=mode,timestamps --reflink=auto -- "$snap" "$new" || {
      rm -rf -- "$new"
      return 1
    }
  fi
  IFS= read -r prev <"$w/last" 2>/dev/null
  case $prev in '' | *[!0-9a-f]*) prev='' ;; esac
  [ -z "$prev" ] || [ "$prev" = "$id" ] || carry "$w/$prev" "$store/snaps/$prev" "$new"
  rm -rf -- "$new.lists"
  if ! mv -T -- "$new" "$wt" 2>/dev/null; then
    # Another shell made it meanwhile.
    rm -rf -- "$new"
    [ -d "$wt" ] || return 1
  fi
  : >"$wt.ok" && printf '%s\n' "$id" >"$w/last"
}
# shipped lists the files of the snapshot tree $1 into $2, NUL-separated
# and sorted, each ./PATH with its inode after a tab (the blob's: two
# snapshots ship a file alike when they link the same one) when $3 is
# "inodes".
shipped() {
  local fmt='%p\0'
  [ "${3:-}" != inodes ] || fmt='%p\t%i\0'
  (cd -- "$1" && find . ! -type d -printf "$fmt") | sort -z >"$2"
}
# take_spare renames the directory's spare copy into $1, and changes it
# from the snapshot it is a copy of into this one: the files the two do not
# ship alike go, and this one's are copied from its tree. It fails when
# there is no spare, or the snapshot it is of is no longer here.
take_spare() {
  local to=$1 spare='' d sid t
  for d in "$b".work.*; do
    [ -d "$d" ] && spare=$d
  done
  sid=${spare##*.work.}
  case $sid in '' | *[!0-9a-f]*) return 1 ;; esac
  [ -d "$store/snaps/$sid" ] && mv -T -- "$spare" "$to" 2>/dev/null || return 1
  [ "$sid" != "$id" ] || return 0
  # A copy of the base the coordinator sent its differences against: they
  # say what to change, with no look at either tree.
  if [ "$sid" = "${use:-}" ]; then
    # shellcheck disable=SC2154 # set by block
    (cd -- "$to" && each "$gone$changed" rm -f --) || return 1
    # shellcheck disable=SC2001 # a line's end, in each line
    (cd -- "$to" && each "$(sed 's,/[^/]*$,,' <<<"$gone" | sort -u)"$'\n' rmdir -p --ignore-fail-on-non-empty -- 2>/dev/null)
    (cd -- "$snap" && each "$changed" cp -R -P --preserve=mode,timestamps --reflink=auto --parents -t "$to" --)
    return
  fi
  t=$to.lists
  mkdir -p -- "$t" &&
    shipped "$store/snaps/$sid" "$t/was" inodes &&
    shipped "$snap" "$t/now" inodes || return 1
  comm -z -12 "$t/was" "$t/now" | sed -z 's/\t[0-9]*$//' | sort -z >"$t/same"
  # Each snapshot's paths, kept for carry.
  sed -z 's/\t[0-9]*$//' "$t/was" | sort -z >"$t/paths.$sid"
  sed -z 's/\t[0-9]*$//' "$t/now" | sort -z >"$t/paths.$id"
  sort -z -m -u "$t/paths.$sid" "$t/paths.$id" | comm -z -23 - "$t/same" >"$t/drop"
  comm -z -23 "$t/paths.$id" "$t/same" >"$t/copy"
  (cd -- "$to" && xargs -0 -r rm -f -- <"$t/drop") || return 1
  # Directories a file gave way to, left empty.
  (cd -- "$to" && sed -z 's,/[^/]*$,,' "$t/drop" | sort -z -u | xargs -0 -r rmdir -p --ignore-fail-on-non-empty -- 2>/dev/null)
  (cd -- "$snap" && xargs -0 -r cp -R -P --preserve=mode,timestamps --reflink=auto --parents -t "$to" -- <"$t/copy")
}
# carry links into the new tree $3 what LOG's jobs wrote in its last tree
# $1, made of the snapshot whose tree is $2: its files that neither
# snapshot ships. Without $2 (pruned) nothing tells them apart: nothing
# comes. What cannot come (a file where this snapshot has a directory) is
# left.
carry() {
  local from=$1 was=$2 to=$3 t=$3.lists
  [ -d "$from" ] && [ -d "$was" ] && mkdir -p -- "$t" || return 0
  [ -e "$t/paths.$id" ] || shipped "$snap" "$t/paths.$id"
  if [ ! -e "$t/paths.${was##*/}" ]; then
    if [ "${was##*/}" = "${use:-}" ]; then
      # What it shipped that this one does not: the coordinator's list.
      : >"$t/paths.${was##*/}"
      # shellcheck disable=SC2001,SC2154 # each line's start; set by block
      [ -z "$gone" ] || sed 's,^,./,' <<<"${gone%$'\n'}" | tr '\n' '\0' | sort -z >"$t/paths.${was##*/}"
    else
      shipped "$was" "$t/paths.${was##*/}"
    fi
  fi
  (cd -- "$from" && find . ! -type d -print0) | sort -z | comm -z -23 - "$t/paths.${was##*/}" | comm -z -23 - "$t/paths.$id" >"$t/wrote"
  (cd -- "$from" && xargs -0 -r cp -al --parents -t "$to" -- <"$t/wrote" 2>/dev/null)
  return 0
}
# make_work_spare makes, once the coordinator has its answer, a clean copy
# of the directory's last snapshot (the base's), for the next working
# tree of any log dir to start as (see take_spare), once it checked the
# blobs it copied against their names, and removes the older ones.
make_work_spare() {
  local want='' d bad
  [ -d "$b" ] && IFS= read -r want <"$b.id" || return 0
  case $want in '' | *[!0-9a-f]*) return 0 ;; esac
  [ ! -d "$b.work.$want" ] && [ -d "$store/snaps/$want" ] || return 0
  { [ -d "$tmp" ] || mkdir -p -- "$tmp"; } &&
    cp -R -P --preserve=mode,timestamps --reflink=auto -- "$store/snaps/$want" "$tmp/work" || return 0
  # The blobs it was copied from still hold what their names say, or no
  # tree is made of them again: whatever changed one (by hand: no job
  # reaches them), the next build ships it anew. They are read again only
  # when one of them changed (its inode, as ctime says) since they were
  # last: a run of the same code again does not read them.
  bad=''
  if [ ! -e "$store/snaps/$want.verified" ] ||
    [ -n "$(find "$store/snaps/$want" -type f -cnewer "$store/snaps/$want.verified" -print -quit 2>/dev/null)" ]; then
    : >"$store/snaps/$want.verified"
    bad=$(join <(cd -- "$store/snaps/$want" && find . -type f -printf '%i\n' | sort -u) \
      <(cd -- "$store/blobs" && find . -type f -printf '%i %p\n' | sort -k1,1) | cut -d' ' -f2 |
      (cd -- "$store/blobs" && xargs -r sha256sum --) |
      awk '{ n = $2; sub(/.*\//, "", n); sub(/x$/, "", n); if (n != $1) print $2 }')
  fi
  if [ -n "$bad" ]; then
    drop_blobs "$bad" "no longer held the content they were stored with (changed by hand?)"
    return 0
  fi
  mv -T -- "$tmp/work" "$b.work.$want" || return 0
  for d in "$b".work.*; do
    [ "$d" = "$b.work.$want" ] || rm -rf -- "$d"
  done
}
# lock takes the lock of base/KEY on descriptor 9: flock(1) on
# base/KEY.lock, waited for at most a minute. It fails when there is no
# lock to take (no flock, a filesystem without locks, a minute gone): the
# shell goes on without it. lock_early starts taking it in the background
# (the lock is the open file's, which the shell keeps), and lock then
# waits for that. unlock lets it go.
locked='' locker='' new_base=''
lock_early() {
  command -v flock >/dev/null || return 0
  exec 9>>"$b.lock" 2>/dev/null || return 0
  flock -w 60 9 2>/dev/null &
  locker=$!
}
lock() {
  if [ -n "$locker" ]; then
    wait "$locker" && locked=1
    locker=
    [ -n "$locked" ]
    return
  fi
  command -v flock >/dev/null || return 1
  { exec 9>>"$b.lock" && flock -w 60 9; } 2>/dev/null && locked=1
}
unlock() {
  exec 9>&-
  locked=
}
# after_answer is what the shell does once it answered: it keeps the new
# blobs, makes the new base (from blobs only: jobs may write in the tree
# now), makes base/KEY's spare unless there is one, and prunes now and
# then. Its output goes nowhere: the coordinator may be gone.
fresh=''
after_answer() {
  local had
  exec </dev/null >/dev/null 2>&1
  [ -z "$fresh" ] || copy_fresh
  keep_blobs
  if [ -n "$new_base" ] && tar -x --no-same-owner -f "$tmp/spare.tar" -C "$store"; then
    [ -n "$locked" ] || lock
    install_base
    # A first tree went to the log dir (see first_tree): the snapshot's
    # own is made of the base, which is links to the store's copies.
    if [ -n "$fresh" ] && [ ! -e "$snap.ok" ] && IFS= read -r had <"$b.id" && [ "$had" = "$id" ]; then
      rm -rf -- "$snap" && cp -al -- "$b" "$snap" && : >"$snap.ok"
    fi
  fi
  # Only under the lock: a build would take the base while it is copied.
  if [ -n "$locked" ] || lock; then
    make_spare
  fi
  unlock
  make_work_spare
  prune_often
}
# first_tree gives the tree $1, just built in TMP of blobs the store had
# none of (TMP/new: its files are their only links), to the log dir as its
# working tree, so that the first tree of a directory is written once
# while the coordinator waits, not copied again (it was 0.9 s of cp per
# 10,000 files). The store's blobs and the snapshot's own tree are made
# after the answer, of copies (see copy_fresh): no blob is a file of a
# tree jobs run in. It fails when the log dir has that tree already.
first_tree() {
  local w=$store/work/$log
  mkdir -p -- "$w" && [ ! -e "$wt" ] && mv -T -- "$1" "$wt" 2>/dev/null || return 1
  : >"$wt.ok" && printf '%s\n' "$id" >"$w/last" || return 1
  fresh=1
}
# copy_fresh replaces TMP/new, whose files are now the log dir's tree's
# (see first_tree), by copies of them, each checked against its name and
# given its name's mode: a job may already write in that tree. A copy that
# does not match is not kept (the next build ships it).
copy_fresh() {
  local bad
  [ -d "$tmp/new" ] || return 0
  cp -R --preserve=mode,timestamps --reflink=auto -- "$tmp/new" "$tmp/copy" || {
    rm -rf -- "$tmp/new" "$tmp/copy"
    return 0
  }
  rm -rf -- "$tmp/new"
  # A blob's mode is its name's (a job may have chmodded the file).
  (cd -- "$tmp/copy" && find . -type f -name '*x' -exec chmod 0555 -- {} + && find . -type f ! -name '*x' -exec chmod 0444 -- {} +)
  bad=$(cd -- "$tmp/copy" && find . -type f -print0 | xargs -0 -r sha256sum -- |
    awk '{ n = $2; sub(/.*\//, "", n); sub(/x$/, "", n); if (n != $1) print $2 }')
  [ -z "$bad" ] || (cd -- "$tmp/copy" && each "$bad"$'\n' rm -f --)
  mv -T -- "$tmp/copy" "$tmp/new"
}
# keep_blobs puts the new blobs in the store, for the snapshots to come
# (the trees hold their own links to them). A directory of blobs the store
# has not (all of them, in a new store) moves there whole; the others'
# blobs are linked.
keep_blobs() {
  local fresh=() d
  [ -d "$tmp/new" ] || return 0
  for d in "$tmp"/new/??; do
    [ -e "$store/blobs/${d##*/}" ] || fresh+=("$d")
  done
  if [ "${#fresh[@]}" = 0 ] || { mv -t "$store/blobs" -- "${fresh[@]}" 2>/dev/null; ! rmdir -- "$tmp/new" 2>/dev/null; }; then
    cp -al -n -- "$tmp/new/." "$store/blobs/" 2>/dev/null
  fi
}
# install_base makes TMP/spare base/KEY, the base of snapshot ID.
install_base() {
  # Another build's, meanwhile: the last one built is the base.
  if [ -e "$b" ] || [ -e "$b.spare" ]; then
    rm -rf -- "$b" "$b.spare" "$b.spare.id"
  fi
  mv -T -- "$tmp/spare" "$b" 2>/dev/null && printf '%s\n' "$id" >"$b.id"
}
make_spare() {
  local have want
  [ -d "$b" ] && IFS= read -r want <"$b.id" || return 0
  [ -d "$b.spare" ] && IFS= read -r have <"$b.spare.id" && [ "$have" = "$want" ] && return 0
  # No process for what is not there: after a build in place, the spare
  # is gone, and TMP is there.
  if [ -e "$b.spare" ] || [ -e "$b.spare.id" ] || [ -e "$tmp/spare" ]; then
    rm -rf -- "$b.spare" "$b.spare.id" "$tmp/spare"
  fi
  { [ -d "$tmp" ] || mkdir -p -- "$tmp"; } && cp -al -- "$b" "$tmp/spare" && mv -T -- "$tmp/spare" "$b.spare" && printf '%s\n' "$want" >"$b.spare.id"
}
# Made by the first that needs it (tar, most often): a name no other shell
# has, on this machine or another one that shares the home.
tmp=$store/tmp/${HOSTNAME:-host}.$$.$RANDOM
trap '[ ! -e "$tmp" ] || rm -rf -- "$tmp"' EXIT
if [ -e "$snap.ok" ]; then
  touch -- "$snap.ok"
  if ! worktree; then
    echo "gpudispatch: cannot make the log dir's working tree $wt (a full disk?)" >&2
    exit 1
  fi
  _g_send have "$store"
  after_answer
  exit 0
fi
base=-
if [ -d "$b" ] && IFS= read -r base <"$b.id"; then
  case $base in '' | *[!0-9a-f]*) base=- ;; esac
fi
_g_send need "$store" "$tmp" "$base"
# A build from the base takes the lock: while the coordinator sends its
# lists.
[ "$base" = - ] || lock_early
_g_record && [ "${#_g_f[@]}" = 4 ] || exit "$_g_x_usage"
use=${_g_f[0]} gone=${_g_f[1]} changed=${_g_f[2]} names=${_g_f[3]}
_g_f=()
case $names in *[!0-9a-fx$'\n']*) exit "$_g_x_usage" ;; esac
# all_new: the store has none of them (see first_tree). lacks: the names
# of those it lacks, a line each.
all_new=''
lacks=''
if [ -n "$new_store" ]; then
  lacks=$names
  all_new=1
elif [ "${#names}" -lt 4096 ]; then
  all_new=1
  for n in $names; do
    if [ -e "$store/blobs/${n:0:2}/$n" ]; then
      all_new=''
    else
      lacks+=$n$'\n'
    fi
  done
else
  # Many: one ls for all, where a test per name costs bash 50 us; and
  # through a file, since ${names%$'\n'} on a list that does not end with
  # a newline costs bash seconds.
  mkdir -p -- "$tmp" && printf '%s\n' "$names" >"$tmp/names" || exit 1
  (cd -- "$store/blobs" && sed -E '/^$/d; s,^(..),\1/\1,' "$tmp/names" | xargs -d '\n' ls -d -- 2>/dev/null) |
    sed 's,^.*/,,' | sort >"$tmp/have"
  lacks=$(sed '/^$/d' "$tmp/names" | sort | comm -23 - "$tmp/have")
  [ -s "$tmp/have" ] || all_new=1
fi
_g_send lacks "$lacks"
# claim takes base/KEY for this build: in place, with its spare, when the
# lock is held and there is a spare of it; else by a rename into TMP
# (another build of the directory meanwhile finds none and makes a whole
# tree). It sets $in (the directory holding the trees to build) and $into
# (their names there). It fails (3) when the base is no longer the one
# the coordinator made its differences against: another build of the
# directory came first.
# shellcheck disable=SC2154 # $use is set by block
claim() {
  local have now=-
  [ -d "$b" ] && IFS= read -r now <"$b.id"
  if [ "$now" = "$use" ] && [ -n "$locked" ] && [ -d "$b.spare" ] &&
    IFS= read -r have <"$b.spare.id" && [ "$have" = "$use" ]; then
    # Neither is that snapshot from now on, should this shell end here.
    printf -- '-\n' >"$b.id" && printf -- '-\n' >"$b.spare.id" || return 1
    in=$store/base into=("$key.spare" "$key")
    return 0
  fi
  if [ "$now" != "$use" ] || ! { mkdir -p -- "$tmp" && mv -T -- "$b" "$tmp/tree" 2>/dev/null; }; then
    echo "gpudispatch: another build of this directory changed its last tree meanwhile" >&2
    return "$_g_x_gone"
  fi
}
in=$tmp into=(tree)
if [ "$use" != - ]; then
  lock
  claim || exit
fi
_g_send into "${into[@]/#/$in/}"
# Built in TMP, the tree needs a new base.
if [ "$in" = "$tmp" ]; then
  new_base=1
  _g_send newbase "$tmp/spare"
fi
_g_send end
# prune_trees removes the paths that went from the trees named (in $in),
# and the directories that leaves empty: one rm and one rmdir for all.
prune_trees() {
  local g=${gone%$'\n'} t paths='' dirs='' d
  declare -A seen
  for t in "$@"; do
    # Each line of $g, the tree's name before it.
    paths+="$t/${g//$'\n'/$'\n'$t/}"$'\n'
  done
  (cd -- "$in" && each "$paths" rm -rf --) || return 1
  while IFS= read -r d; do
    d=${d%/*}
    [ -z "${seen[$d]:-}" ] || continue
    seen[$d]=1
    dirs+=$d$'\n'
  done <<<"${paths%$'\n'}"
  # A tree left empty goes too: the tar stream makes it again.
  (cd -- "$in" && each "$dirs" rmdir -p --ignore-fail-on-non-empty -- 2>/dev/null)
  return 0
}
# shellcheck disable=SC2154 # set by block
if [ -n "$gone" ] && [ "$use" != - ]; then
  prune_trees "${into[@]}" || exit 1
fi
tar -x --no-same-owner -f - -C "$store" || exit 1
if [ ! -e "$tmp/end" ]; then
  echo "gpudispatch: the code's stream was cut off on its way" >&2
  exit 1
fi
tree=$in/${into[0]}
if [ -n "$all_new" ] && [ "$in" = "$tmp" ] && first_tree "$tree"; then
  _g_send built
  after_answer
  exit 0
fi
if ! mv -T -- "$tree" "$snap" 2>/dev/null && [ ! -e "$snap.ok" ]; then
  # What a build cut off left.
  rm -rf -- "$snap" && mv -T -- "$tree" "$snap" || exit 1
fi
: >"$snap.ok" || exit 1
if [ "$in" != "$tmp" ]; then
  # In place: the base is the tree as it was built.
  printf '%s\n' "$id" >"$b.id"
fi
if ! worktree; then
  echo "gpudispatch: cannot make the log dir's working tree $wt (a full disk?)" >&2
  exit 1
fi
_g_send built
# The lock, when held, is kept for the spare.
after_answer
