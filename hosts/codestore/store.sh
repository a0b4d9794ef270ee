# gpudispatch code store. Run by bash on a machine, it builds a snapshot's
# tree in the user's content store, ~/.gpudispatch/code (0700):
#   blobs/XX/HASH[x]  the content of files, by hash (x: executable),
#                     read-only, shared by hard links;
#   snaps/ID/         a snapshot's tree, whose files are links to blobs;
#   snaps/ID.ok       there once the tree is whole; touched at each use.
# stdin, after this code: the snapshot's ID on a line. The shell answers
# "have STORE" when the tree is there, and is done; else "need STORE TMP",
# then reads a byte count on a line and that many bytes of blob names, one
# per line, and answers
# the names of those the store lacks, one per line, then "end". Then it
# reads a tar stream it extracts in TMP: new/XX/BLOB for the blobs it
# lacked, and tree/..., whose files are hard links to blobs by absolute
# path (in the store, or in TMP/new). Once tar succeeded, the new blobs
# join the store, the tree becomes snaps/ID, and the shell says "built".
set -u
umask 077
store=$HOME/.gpudispatch/code
if [ ! -d "$store" ]; then
  mkdir -p -- "${store%/*}" && mkdir -m 0700 -- "$store" || exit 1
fi
if [ ! -O "$store" ] || [ -L "$store" ]; then
  echo "gpudispatch: $store is not a directory of yours" >&2
  exit 1
fi
mkdir -p -- "$store/blobs" "$store/snaps" "$store/tmp" || exit 1
IFS= read -r id || exit 1
case $id in '' | *[!0-9a-f]*) exit 2 ;; esac
snap=$store/snaps/$id
if [ -e "$snap.ok" ]; then
  touch -- "$snap.ok"
  printf 'have %s\n' "$store"
  exit 0
fi
tmp=$(mktemp -d -- "$store/tmp/XXXXXXXX") || exit 1
trap 'rm -rf -- "$tmp"' EXIT
printf 'need %s %s\n' "$store" "$tmp"
# The names come as one block of known length: one read, where a read
# per line would take a system call per byte.
IFS= read -r n || exit 1
case $n in '' | *[!0-9]*) exit 2 ;; esac
names=
[ "$n" = 0 ] || LC_ALL=C IFS= read -r -N "$n" names || exit 1
case $names in *[!0-9a-fx$'\n']*) exit 2 ;; esac
for b in $names; do
  [ -e "$store/blobs/${b:0:2}/$b" ] || printf '%s\n' "$b"
done
echo end
tar -x -P --no-same-owner -f - -C "$tmp" || exit 1
if [ -d "$tmp/new" ]; then
  # The tree holds its own links to the new blobs: the store's are for
  # the snapshots to come.
  cp -al -n -- "$tmp/new/." "$store/blobs/" 2>/dev/null
fi
if ! mv -T -- "$tmp/tree" "$snap" 2>/dev/null && [ ! -e "$snap.ok" ]; then
  # What a run cut off left.
  rm -rf -- "$snap" && mv -T -- "$tmp/tree" "$snap" || exit 1
fi
: >"$snap.ok" || exit 1
echo built
