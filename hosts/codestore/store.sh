# gpudispatch code store. Run by bash on a machine, it builds a snapshot's
# tree in the user's content store, by default ~/.gpudispatch/code (0700):
#   blobs/XX/HASH[x]  the content of files, by hash (x: executable),
#                     read-only, shared by hard links;
#   snaps/ID/         a snapshot's tree, whose files are links to blobs:
#                     jobs run in it (and write their files there);
#   snaps/ID.ok       there once the tree is whole; touched at each use;
#   base/KEY/         a copy of the last tree built of the directory KEY
#   base/KEY.id       names, which no job touches: the next tree of that
#                     directory is made from it by its differences.
# It runs after prune.sh, which defines prune and open_store.
# stdin, after this code: the store's directory on a line (see open_store),
# then "ID KEY KEEP" on a line (KEEP: minutes, see
# prune). The shell answers "have"
# and STORE, on lines, when the tree is there, and is done. Else "need",
# STORE, TMP and BASE (the ID of base/KEY, or "-"), on lines, then it
# reads blocks, each a byte
# count on a line and that many bytes: the base to use ("-" for none), the
# paths the base has that the tree has not or has otherwise (one per
# line), the names of the blobs the changed files need (one per line). It
# answers the names of those the store lacks, one per line, then "end".
# Then it reads a tar stream it extracts in TMP: new/XX/BLOB for the blobs
# it lacked, and tree/..., the tree's changed files as hard links to blobs
# by absolute path (in the store, or in TMP/new), its links, and their
# directories. Once tar succeeded, the new blobs join the store, the tree
# becomes snaps/ID and the new base/KEY, and the shell says "built".
set -u
umask 077
open_store
# shellcheck disable=SC2154 # set by open_store
mkdir -p -- "$store/blobs" "$store/snaps" "$store/tmp" "$store/base" || exit 1
IFS=' ' read -r id key keep || exit 1
case $id$key in '' | *[!0-9a-f]*) exit 2 ;; esac
case $keep in '' | *[!0-9]*) exit 2 ;; esac
snap=$store/snaps/$id
if [ -e "$snap.ok" ]; then
  touch -- "$snap.ok"
  printf 'have\n%s\n' "$store"
  prune_often
  exit 0
fi
tmp=$(mktemp -d -- "$store/tmp/XXXXXXXX") || exit 1
trap 'rm -rf -- "$tmp"' EXIT
base=-
if [ -d "$store/base/$key" ] && IFS= read -r base <"$store/base/$key.id"; then
  case $base in '' | *[!0-9a-f]*) base=- ;; esac
fi
printf 'need\n%s\n%s\n%s\n' "$store" "$tmp" "$base"
# block reads a block into the variable $1: one read, where a read per
# line would take a system call per byte.
block() {
  local n
  IFS= read -r n || exit 1
  case $n in '' | *[!0-9]*) exit 2 ;; esac
  printf -v "$1" ''
  [ "$n" = 0 ] || LC_ALL=C IFS= read -r -N "$n" "$1" || exit 1
}
block use
block gone
block names
# shellcheck disable=SC2154 # set by block
case $names in *[!0-9a-fx$'\n']*) exit 2 ;; esac
for b in $names; do
  [ -e "$store/blobs/${b:0:2}/$b" ] || printf '%s\n' "$b"
done
echo end
# shellcheck disable=SC2154 # set by block
if [ "$use" != - ]; then
  # The base is taken (another build of the directory makes a whole tree
  # meanwhile), and what differs goes.
  if [ "$use" != "$base" ] || ! mv -T -- "$store/base/$key" "$tmp/tree" 2>/dev/null; then
    echo "gpudispatch: another run took the last tree of this directory meanwhile: the next try builds it whole" >&2
    exit 1
  fi
  rm -f -- "$store/base/$key.id"
  if [ -n "$gone" ]; then
    (cd -- "$tmp/tree" && printf '%s' "$gone" | xargs -d '\n' rm -rf --) || exit 1
    find "$tmp/tree" -depth -mindepth 1 -type d -empty -delete
  fi
fi
tar -x -P --no-same-owner -f - -C "$tmp" || exit 1
if [ -d "$tmp/new" ]; then
  # The tree holds its own links to the new blobs: the store's are for
  # the snapshots to come.
  cp -al -n -- "$tmp/new/." "$store/blobs/" 2>/dev/null
fi
cp -al -- "$tmp/tree" "$tmp/snap" || exit 1
if ! mv -T -- "$tmp/snap" "$snap" 2>/dev/null && [ ! -e "$snap.ok" ]; then
  # What a build cut off left.
  rm -rf -- "$snap" && mv -T -- "$tmp/snap" "$snap" || exit 1
fi
: >"$snap.ok" || exit 1
rm -rf -- "$store/base/$key"
if mv -T -- "$tmp/tree" "$store/base/$key" 2>/dev/null; then
  printf '%s\n' "$id" >"$store/base/$key.id"
fi
echo built
prune_often
