# gpudispatch follower. Run by bash on a job's machine, it takes up the
# output of a job that a job shell started there (shell.sh) for a
# coordinator that lost the job shell's connection, or for a later one: $1
# is the job's tag, $2 and $3 how many bytes of its stdout and stderr the
# coordinator has.
#
# It finds the job in the spool (the shell's TAG.job names it), then writes
# a first line on stdout, the job's end mark, a space and the job's pid, and
# on stderr the end mark and a newline; then each stream from the byte the
# coordinator has, as its shell's tee writes it, up to the end of the
# job: the end mark and, on stdout, the job's end (see shell.sh). Once its
# shell is gone (or the machine was started again since), it writes what is
# there and exits. Exit 3 when nothing of the job is kept.
#
# stdin: the code, then "c" to cancel the job: TERM to its group, then KILL
# after the grace ($4 seconds), its shell says so at its end; "d" when the
# coordinator has the job's end: what is kept of the job goes (its shell's
# files too, once the shell is gone). When stdin ends, the follower stops.
#
# With $5 "kill", it stops the job (as "c" does) and waits until its group
# is gone, with no output: a job its coordinator gave up for lost.
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
spool=$_g_d_spool
tag=$1 out=$2 err=$3 grace=$4 mode=$5
# find_job sets rec (and the fields) to the record of the job: its shell
# writes it as the job starts, so a job that its coordinator had just sent
# is given 3 s.
find_job() {
  local _
  for _ in $(seq 30); do
    for rec in "$spool"/*.job; do
      [ -e "$rec" ] || break
      IFS=' ' read -r jtag files pid mark ob eb jpid boot _ <"$rec" || continue
      [ "$jtag" = "$tag" ] && return 0
    done
    sleep 0.1
  done
  return 1
}
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
find_job || exit "$_g_x_gone"
{
  now=-
  IFS= read -r now </proc/sys/kernel/random/boot_id 2>/dev/null
  if [ "$mode" = kill ]; then
    [ "$boot" = "$now" ] || exit 0
    echo cancelled >"$spool/${files%-*}.why"
    kill -TERM -- -"$jpid" 2>/dev/null || exit 0
    sleep "$grace" &
    t=$!
    while kill -0 -- -"$jpid" 2>/dev/null; do
      kill -0 "$t" 2>/dev/null || kill -KILL -- -"$jpid" 2>/dev/null
      sleep 0.1
    done
    kill "$t" 2>/dev/null
    exit 0
  fi
  follow=()
  # The shell still runs when its pid is that of a job shell of that tag,
  # on this boot.
  if [ "$boot" = "$now" ]; then
    case $(ps -o args= -p "$pid" 2>/dev/null) in
      *"gpudispatch-job ${files%-*}") follow=(-f "--pid=$pid") ;;
    esac
  fi
  printf '%s %s\n' "$mark" "$jpid"
  printf '%s\n' "$mark" >&2
  tail -c +$((ob + out + 1)) "${follow[@]}" -- "$spool/$files.out" &
  t1=$!
  tail -c +$((eb + err + 1)) "${follow[@]}" -- "$spool/$files.err" >&2 &
  t2=$!
  # Once both tails have ended (the shell is gone), a few more looks: the
  # coordinator's "d" may be on its way.
  left=3
  while :; do
    if ! kill -0 "$t1" 2>/dev/null && ! kill -0 "$t2" 2>/dev/null; then
      [ "$left" -gt 0 ] || break
      left=$((left - 1))
    fi
    IFS= read -r -N 1 -t 1 cmd
    rc=$?
    if [ "$rc" -gt 128 ]; then
      continue
    elif [ "$rc" -ne 0 ]; then
      break # the coordinator has what it wanted
    elif [ "$cmd" = d ]; then
      IFS=' ' read -r jtag _ <"$rec" && [ "$jtag" = "$tag" ] && rm -f -- "$rec"
      # Its shell, whose job has ended, is on its way out: once it is gone
      # (a zombie is gone) its files go. A shell that looked for the record
      # just before it went would leave them otherwise.
      for _ in $(seq 100); do
        case $(ps -o stat= -p "$pid" 2>/dev/null) in
          "" | Z*)
            rm -f -- "$spool/$files.out" "$spool/$files.err"
            break
            ;;
        esac
        sleep 0.05
      done
      break
    elif [ "$cmd" = c ] && [ ${#follow[@]} -gt 0 ]; then
      echo cancelled >"$spool/${files%-*}.why"
      if kill -TERM -- -"$jpid" 2>/dev/null; then
        (
          sleep "$grace"
          kill -KILL -- -"$jpid"
        ) </dev/null >/dev/null 2>&1 &
      fi
    fi
  done
  kill "$t1" "$t2" 2>/dev/null
  exit 0
}
