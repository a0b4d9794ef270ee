# gpudispatch results: run by bash on a machine, it sends back the files a
# job named for return, from the job's workdir.
# stdin, after this code, a record (spawn.Record): the workdir ("tree LOG
# ID": log dir LOG's working tree of snapshot ID in the content store;
# "snap ID": the snapshot's own tree, where jobs of an earlier gpudispatch
# ran; "dir PATH": PATH, "" or "~" for the home directory, "~/..." under
# it, relative paths from it), then the patterns (relative paths, bash
# globs, ** included).
# The shell answers in records (_g_send): per pattern that names nothing
# "miss" PATTERN; per link that leads to no file "link" PATH; per file
# (links to files followed) "file" SIZE MTIME PATH, PATH starting with
# "./"; then "end". It reads a record of a field per file, in that
# order: "-" to skip it, else the byte at which to start. It sends the files to start past
# their first byte, each exactly SIZE-START bytes (zeros past a file that
# shrank), then a tar stream of those to send whole (one block per record,
# so that it ends with its end blocks), then the size and mtime of each file
# sent as it is now: "now", its path and "SIZE MTIME", then "end".
# A file whose size or mtime differs from the first answer, or that is not
# listed, changed while it was sent. MTIME is seconds with a fraction.
# shellcheck disable=SC2154 # _g_f and $_g_x_* come from spawn/prelude.sh, sent first
set -u
_g_record && [ "${#_g_f[@]}" -ge 1 ] || exit 1
where=${_g_f[0]}
pats=("${_g_f[@]:1}")
case $where in
tree\ *)
  t=${where#tree }
  case ${t/ /} in '' | *[!0-9a-f]*) exit "$_g_x_usage" ;; esac
  case $t in " "* | *" ") exit "$_g_x_usage" ;; esac
  # shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
  dir=$_g_d_code/work/${t/ //}
  ;;
snap\ *)
  dir=$_g_d_code/snaps/${where#snap }
  case ${where#snap } in '' | *[!0-9a-f]*) exit "$_g_x_usage" ;; esac
  ;;
dir\ | dir\ \~) dir=$HOME ;;
dir\ \~/*) dir=$HOME/${where#dir \~/} ;;
dir\ /*) dir=${where#dir } ;;
dir\ *) dir=$HOME/${where#dir } ;;
*) exit "$_g_x_usage" ;;
esac
if ! cd -- "$dir" 2>/dev/null; then
  echo "gpudispatch: the job's workdir $dir is not there any more" >&2
  # shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
  exit "$_g_x_gone"
fi
shopt -s nullglob globstar
top=$(pwd -P)
# walked says whether the directory $1 (./...) is reached without a link:
# a glob never brings what a link to a directory leads to (lnk/* with
# lnk -> /etc/ssh). Once per directory, with no process.
declare -A walked
walks() {
  local d=$1 real
  [ "$d" != . ] || return 0
  if [ -z "${walked[$d]:-}" ]; then
    walked[$d]=no
    if cd -P -- "$d" 2>/dev/null; then
      real=$PWD
      cd -- "$top" || exit "$_g_x_gone"
      [ "$real" != "$top/${d#./}" ] || walked[$d]=yes
    fi
  fi
  [ "${walked[$d]}" = yes ]
}
files=()
sizes=()
for pat in "${pats[@]}"; do
  p=${pat%/}
  # The pattern is globbed, never split nor otherwise expanded.
  IFS=
  # shellcheck disable=SC2206 # globbed on purpose, IFS is empty
  m=(./$p)
  IFS=' '
  found=0
  for x in "${m[@]}"; do
    [ -e "$x" ] || [ -L "$x" ] || continue
    found=1
    if ! walks "${x%/*}"; then
      _g_send link "$x"
      continue
    fi
    # find says the size and mtime of regular files: no process per file.
    while IFS= read -r -d '' rec; do
      kind=${rec%% *} rec=${rec#* }
      if [ "$kind" = l ]; then
        if [ -f "$rec" ] && IFS=' ' read -r s t < <(stat -L -c '%s %.9Y' -- "$rec"); then
          _g_send file "$s" "$t" "$rec"
          files+=("$rec")
          sizes+=("$s")
        else
          _g_send link "$rec"
        fi
        continue
      fi
      s=${rec%% *} rec=${rec#* }
      t=${rec%% *} f=${rec#* }
      _g_send file "$s" "$t" "$f"
      files+=("$f")
      sizes+=("$s")
    done < <(find -P "$x" \( -type f -printf 'f %s %T@ %p\0' \) -o \( -type l -printf 'l %p\0' \))
  done
  [ "$found" = 1 ] || _g_send miss "$pat"
done
_g_send end
# Every answer is read before anything is sent: neither side then waits
# for the other to read.
_g_record && [ "${#_g_f[@]}" = "${#files[@]}" ] || exit 1
ats=("${_g_f[@]}")
for at in "${ats[@]}"; do
  # shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
  case $at in - | 0) ;; '' | *[!0-9]*) exit "$_g_x_usage" ;; esac
done
whole=()
sent=()
for i in "${!files[@]}"; do
  at=${ats[i]}
  case $at in
  -) continue ;;
  0) whole+=("${files[i]}") ;;
  *)
    k=$((sizes[i] - at))
    { tail -c +$((at + 1)) -- "${files[i]}" 2>/dev/null; head -c "$k" /dev/zero; } | head -c "$k"
    ;;
  esac
  sent+=("${files[i]}")
done
if [ "${#whole[@]}" -gt 0 ]; then
  tar -c -h --hard-dereference -S -b 1 --no-recursion --null -T <(printf '%s\0' "${whole[@]}") -f - 2>/dev/null
else
  head -c 1024 /dev/zero
fi
# One stat for them all (xargs keeps to the argument limit); a file that
# went is left out.
if [ "${#sent[@]}" -gt 0 ]; then
  while IFS= read -r -d '' f && IFS= read -r -d '' st; do
    _g_send now "$f" "$st"
  done < <(printf '%s\0' "${sent[@]}" | xargs -0 stat -L --printf '%n\0%s %.9Y\0' -- 2>/dev/null)
fi
_g_send end
