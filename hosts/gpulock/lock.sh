# gpudispatch GPU lock holder: one per machine and run, it holds the locks
# of the run's GPUs there. Run by bash after lockfs.sh (the layout of the
# lock directory), with $0 the holders' process name and $1 the run.
#
# stdin: records (spawn.Record, read by _g_record): first one of the
# lock dir and the arguments of _g_first (a look at the machine of the
# coordinator's, which it runs first: gpulock.Prologue); the holder then
# checks the lock dir (lockfs.sh) and answers "ready" (a run starts its
# holders as it opens the hosts, before it knows what follows); then one
# of who (user@host of the coordinator), the coordinator's pid,
# heartbeat timeout (seconds), linger (seconds), the probe's time limit
# (seconds), how nvidia-smi is found ("login", "as-is", or "path": then
# on the next field's PATH, the login shell's as a job shell read it),
# the GPUs as the coordinator just saw them (nvidia-smi's "index, uuid,
# name, memory.total, memory.used" lines, or empty: then nvidia-smi is
# asked), and "1" when the run takes part in fair share (below); then
# requests, a record each: "lock" and N, "release" and N, "want" and NEED
# (the run waits for more of this machine's GPUs than its share lets it
# keep, its first job for them needing NEED GPUs together, and "part" and
# KEY after it when that job is a part of one over several hosts, KEY
# when that job began to wait, in microseconds since 1970, the same on
# each of its hosts: its record of waiting is made, or renamed,
# unanswered), "unwant" (it waits for none
# any more: the record goes, unanswered), "exit", or none (no field) as a
# heartbeat. GPU N's lock is named by its UUID as the login shell's
# nvidia-smi reports it, else "index-N". N at 65536 and above is a MIG
# instance, 65536 + 256 × GPU + its device number: its lock is its GPU's
# name with "-migD" after it.
#
# stdout: a record per request (written by _g_send): "locked" N KEY MIB
# (MIB: the memory used on GPU N as the holder started, "-" if unknown),
# "busy" N KEY WHY (and later "free" N once that lock looks free) when
# another run holds the lock (WHY names it), "failed" N WHY when something
# else is in its place, or "released" N; unasked, "free" N for a GPU it
# took for the run's turn (see share_tick). Exit $_g_x_notfound when flock(1) is
# missing, $_g_x_unsafe when the lock dir is not safe (stderr says why).
# (spawn/prelude.sh names the statuses.) Told "exit", the holder lets go of everything
# at once. One whose coordinator went silent (stdin ended or no heartbeat
# for the timeout) keeps its locks for the linger time; then it keeps the
# lock of each GPU on which a job of the run still runs (jobs outlive their
# coordinator), looking every 2 s, and lets go of each as its job ends; it
# exits holding nothing, and the locks die with it. A holder
# of the same run that finds such a lingering holder (its run lost the
# connection and came back) takes the lock over: the jobs it covers are the
# run's own.
# shellcheck disable=SC2154 # key, pdir, why and lfd are set by lockfs.sh
holder=$0
run=$1
_g_record && [ "${#_g_f[@]}" -ge 1 ] || exit "$_g_x_unread"
dir=${_g_f[0]}
_g_first "${_g_f[@]:1}" </dev/null 2>/dev/null
lock_dir "$dir" || exit "$_g_x_unsafe"
_g_send ready
# Told to exit (or stdin ended) before the rest, it never held anything.
_g_record && [ "${#_g_f[@]}" = 9 ] || exit 0
who=${_g_f[0]} cpid=${_g_f[1]} hb=${_g_f[2]} linger=${_g_f[3]}
probe=${_g_f[4]} shell=${_g_f[5]} lpath=${_g_f[6]} seen=${_g_f[7]} sharing=${_g_f[8]}
command -v flock >/dev/null || exit "$_g_x_notfound"
# A GPU's lock is named by its UUID: nvidia-smi is given the probe time (a
# hung one, a GPU fallen off the bus, fails the holder with $_g_x_timedout; where
# timeout(1) is missing, it is not bounded).
limit=()
if command -v timeout >/dev/null; then limit=(timeout -k 2 "$probe"); fi
# nvidia-smi is found as the machine's jobs would find it: through the
# login shell ("login"), on the PATH a job shell's login read ("path"),
# or on this holder's own PATH ("as-is").
# shellcheck disable=SC2054 # the commas are nvidia-smi's
query=(nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used --format=csv,noheader,nounits)
if [ "$shell" = login ]; then query=("${SHELL:-/bin/bash}" -lc "${query[*]}"); fi
if [ -n "$seen" ]; then
  uuids=$seen
else
  uuids=$(
    [ -z "$lpath" ] || PATH=$lpath
    "${limit[@]}" "${query[@]}" 2>/dev/null </dev/null
  )
  case $? in 124 | 137) exit "$_g_x_timedout" ;; esac
fi
# read_migs sets migs: by id, the UUID nvidia-smi -L gives a MIG instance,
# which is what a job's CUDA_VISIBLE_DEVICES names it by (running_on). It
# is asked only once the coordinator went silent, and only once: nvidia-smi
# can take a second to answer, and a holder's start is on its run's way.
migs=()
read_migs() {
  local list=(nvidia-smi -L) line gi='' d u
  if [ "$shell" = login ]; then list=("${SHELL:-/bin/bash}" -lc "${list[*]}"); fi
  while IFS= read -r line; do
    case $line in
      "GPU "*) gi=${line#GPU } gi=${gi%%:*} ;;
      *"MIG "*" Device "*"(UUID: "*")")
        d=${line#*Device} d=${d%%:*} d=${d// /}
        case $gi$d in '' | *[!0-9]*) continue ;; esac
        u=${line##*UUID: }
        migs[65536 + gi * 256 + d]=${u%)}
        ;;
    esac
  done < <(
    [ -z "$lpath" ] || PATH=$lpath
    "${limit[@]}" "${list[@]}" 2>/dev/null </dev/null
  )
}
fds=()      # by GPU index: the open lock directory of each GPU held
recs=()     # by GPU index: the record saying so
watchers=() # by GPU index: the pid of the watch_free of a GPU found locked
made=()     # the records of the locks taken since the last flush
gone=()     # the records of the locks let go since then
shut=()     # the open lock directories of those
said=()     # the answers to say then
reserved=() # by GPU index: the GPUs held for the run's turn (reserve)
# take locks GPU $1 and says how it went. A GPU this holder took for the
# run's turn (reserve) is the run's at once.
take() {
  local g=$1
  case $g in '' | *[!0-9]*)
    _g_send failed "$g" "not a GPU id"
    return
    ;;
  esac
  name_lock "$g"
  if [ -n "${reserved[g]-}" ]; then
    charge
    unset 'reserved[g]'
    said_locked "$g"
    return
  fi
  if grab "$g" take; then
    said_locked "$g"
  elif [ -z "$busy" ]; then
    _g_send failed "$g" "$why"
  else
    _g_send busy "$g" "$key" "$(holders "$key")"
    watch_free "$g" "$key"
    want
  fi
}
# name_lock GPU sets key to the name of GPU's lock, and own to this user's
# lock directory of it.
name_lock() {
  local g=$1
  if ((g >= 65536)); then
    lock_key $(((g - 65536) / 256)) "$uuids"
    key=$key-mig$(((g - 65536) % 256))
  else
    lock_key "$g" "$uuids"
  fi
  own=$pdir/gpudispatch-gpu-$key.$EUID
}
# grab GPU take|turn locks GPU (name_lock said which) and makes its record
# at the next flush, or fails: with busy set when another run holds it,
# else something is in the place of its lock (why says what). For a
# "take", a lingering holder of this run is taken over (see takeover); for
# a "turn", another user's lock held is not waited for (see others_held).
grab() {
  local g=$1 fd
  busy=''
  [ -e "$own" ] || [ -L "$own" ] || mkdir -m 0755 -- "$own" 2>/dev/null
  open_lock "$own" || return 1
  fd=$lfd
  if [ ! -O /dev/fd/"$fd" ]; then
    exec {fd}<&-
    # shellcheck disable=SC2012
    why="$own was made by another user: $(ls -ld -- "$own" 2>&1)"
    return 1
  fi
  if ! flock -n -x "$fd" && { [ "$2" != take ] || ! takeover "$key" "$fd"; }; then
    exec {fd}<&-
    busy=1
    return 1
  fi
  if others_held "$key" "$2"; then
    exec {fd}<&-
    busy=1
    return 1
  fi
  forget_dead "$key"
  recs[g]=$pdir/gpudispatch-held-$key~$$~$run~$who~$cpid
  made+=("${recs[g]}")
  charge
  fds[g]=$fd
}
# said_locked GPU answers that GPU (of key) is locked, with the memory
# used on it as this holder started, before any job of its run was there:
# others' work.
said_locked() {
  local g=$1 i m used=- rec
  while IFS=, read -r i _ _ _ m _; do
    if [ "$i" = "$g" ]; then
      used=${m// /}
      break
    fi
  done <<<"$uuids"
  case $used in '' | *[!0-9]*) used=- ;; esac
  _g_encode rec locked "$g" "$key" "$used"
  said+=("$rec")
}
# watch_free GPU KEY says "free GPU" once the holders' records of KEY that
# it saw are gone (each holder removes its own as it lets go; one that died
# leaves it, and the coordinator's next look finds the GPU free then). A
# lock held with no record (not a gpudispatch run) is not watched past
# three seconds; one its holder lets go of just as it looks (its record
# went first) is said free then, not at the next recheck. It looks
# every half second, from a child that holds none of this holder's locks
# and takes none: one per GPU, ended with this holder.
watch_free() {
  local g=$1 key=$2
  [ -z "${watchers[g]-}" ] || kill "${watchers[g]}" 2>/dev/null
  (
    for fd in "${fds[@]}" "${shut[@]}"; do exec {fd}<&-; done
    shopt -s nullglob
    held=("$pdir/gpudispatch-held-$key~"*)
    if [ ${#held[@]} -eq 0 ]; then
      # No record: its holder is letting go of it as this one looks (a
      # holder removes its record, then closes the lock), or it is no
      # gpudispatch run's. The locks say which, within a few seconds.
      for _ in $(seq 30); do
        free=1
        for e in "$pdir/gpudispatch-gpu-$key".*; do
          open_lock "$e" || continue
          flock -n -s "$lfd" || free=''
          exec {lfd}<&-
        done
        if [ -n "$free" ]; then
          _g_send free "$g"
          exit 0
        fi
        sleep 0.1
      done
      exit 0
    fi
    while [ ${#held[@]} -gt 0 ]; do
      sleep 0.5
      held=("$pdir/gpudispatch-held-$key~"*)
    done
    _g_send free "$g"
  ) </dev/null 2>/dev/null &
  watchers[g]=$!
}
# takeover KEY FD takes KEY's lock on FD from a lingering holder of this
# run, and succeeds once it holds it. It kills only a pid proven to be such
# a holder: named by a record this user made, running as this user, with
# this run in its argv.
takeover() {
  local rec hpid hrun
  for rec in "$pdir/gpudispatch-held-$1~"*; do
    if [ -L "$rec" ] || [ ! -O "$rec" ]; then continue; fi
    IFS='~' read -r _ hpid hrun _ <<<"${rec##*/}"
    if [ "$hrun" != "$run" ] || [ "$hpid" = $$ ]; then continue; fi
    case $hpid in '' | *[!0-9]*) continue ;; esac
    [ "$(ps -o uid= -p "$hpid" 2>/dev/null | tr -d ' ')" = "$EUID" ] || continue
    ps -o args= -p "$hpid" 2>/dev/null | grep -q -e " $holder $run\$" || continue
    kill "$hpid" 2>/dev/null
    flock -w 10 -x "$2" && return 0
  done
  return 1
}
# forget_dead KEY removes this user's records of KEY whose holder is gone.
forget_dead() {
  local rec hpid hrun
  for rec in "$pdir/gpudispatch-held-$1~"*; do
    if [ -L "$rec" ] || [ ! -O "$rec" ]; then continue; fi
    IFS='~' read -r _ hpid hrun _ <<<"${rec##*/}"
    ps -o args= -p "$hpid" 2>/dev/null | grep -q -e " $holder $hrun\$" || rmdir -- "$rec" 2>/dev/null
  done
}
# release lets go of GPU $1 at the next flush.
release() {
  if [ -n "${fds[$1]-}" ]; then
    charge
    gone+=("${recs[$1]}")
    shut+=("${fds[$1]}")
    unset 'fds[$1]' 'recs[$1]'
  fi
}
# flush makes the records of the locks taken since the last flush, then
# removes those of the locks let go and lets go of them, one process each,
# then says what it was asked to say: requests that come together are
# answered together. A lock is held before its record is made, and its
# record removed before it is let go.
flush() {
  local fd
  [ ${#made[@]} -eq 0 ] || mkdir -m 0755 -- "${made[@]}" 2>/dev/null
  [ ${#gone[@]} -eq 0 ] || rmdir -- "${gone[@]}" 2>/dev/null
  for fd in "${shut[@]}"; do exec {fd}<&-; done
  [ ${#said[@]} -eq 0 ] || printf '%s' "${said[@]}"
  made=() said=() gone=() shut=()
}
# Fair share. A run that asked for a GPU here that another run holds
# waits for this host: its holder says so in the lock dir, with a record
# of its own (gpudispatch-want-HOST~PID~RUN~WHO~NEED, HOST the lock's name
# of the host's first GPU: a lock dir may be shared by hosts, over NFS or
# here in tests, and a host counts its own records; NEED the GPUs the run's
# first job for the host needs together, 1 where it is not said), made too
# when the coordinator says that the run, held to its share, has more jobs
# for the host ("want"), kept until it says the run waits no more
# ("unwant"), and gone with the holder. The record's time is the run's place in the line
# for the GPUs that whole shares leave over: a record new in the line
# takes the time just after the oldest waiting record's, and a run that holds more than
# its whole share moves back by the GPU time it has above it (start-time
# fair queueing: over time, each has as much of those as the others).
# Every second while it holds locks or waits, and a run's record of
# waiting is there, the holder works out each run's share of the host's
# GPUs: equal between
# the users holding or waiting for them (a user is a record's owner, not
# what its name says: a forged record is one user more at most), then
# equal between one user's runs (none, where they are more than its
# GPUs); the GPUs those whole shares leave go one each to the runs first
# in that line, so that they go round as jobs end (three runs on four
# GPUs, or five on four). A run whose first job needs more GPUs together
# than its share cannot use that share: it waits with none, and the
# others share the GPUs without it (no GPU stands idle for a job that
# cannot start), until it is the first in the line: then it has its turn
# (a job of several GPUs is never starved): its job's GPUs are its share,
# the others share the rest, and its holder takes each GPU as it frees
# up (reserve) until its job takes them; a turn under which a GPU stands
# free and unlocked is void (watch_turn). A part of a job over several
# hosts has its turn too, but turns between such parts go by the time
# their jobs began to wait (KEY, the same on every host), not by the
# line: when the line's first is such a part, the turn is that of the
# part that waits here whose job waits longest, on every host alike, so
# that two such jobs never hold one host each for the other. A part
# whose GPUs are all taken here waits for its other hosts, parked (its
# record says so): it keeps those GPUs, which are its share, leaves the
# line (the next turn here may begin, on the other GPUs), is not a
# forged turn for holding them with its time still, and gives them up
# at once when the turn here is that of a part whose job began to wait
# before its own (that job may need them, and waits on another host for
# it). A run that waits with no lock here hears its
# share too (none till its turn). While a run below its
# share waits, the holder tells its coordinator its run's own share
# ("share" N and who waits, each "run ID of WHO waits with M": it keeps at
# most N of the host's GPUs busy, starting no new job on a GPU it frees
# past that), and "share" "-" once none does. A
# record whose holder is gone is no one's. Nothing running is stopped. A
# run that takes no part (--no-share) leaves no record and hears no share.
wanted='' base=0 vmin='' wtag=0 wlast=0 fresh='' shared='- ' here='' turn='' tneed=0 rfull='' tlook=0
wneed=1 wkey='' wname='' parked='' tkey='' tyield=''
owaiting='' moved=''
tturn='' served='' smoved='' nwait=0 tmtime='' theld=0 tfirst='' tbase=0 lfirst='' lsince='' lmoved=''

# barred, by uid: until when (epoch seconds) that user has no turn here;
# idle, by GPU index: since when it stands free and unlocked under another
# run's turn (see watch_turn).
# lbarred, by uid: until when that user's records count as the newest in
# the line (see watch_line); plooked, by UID~RUN, when a parked record's
# locks were last looked at and whether they held its GPUs (locked_for);
# free and theirs, look_locks's.
declare -A barred=() idle=() lbarred=() plooked=()
free=() theirs=0
# mine sets here to the host's name in want records, and keys to its GPUs'
# locks' names, once. Where nvidia-smi lists no GPU (GPUs given by hand),
# the host's GPUs are those whose locks are named by index (keyless).
declare -A keys=()
keyless=''
mine() {
  local i rest
  [ -z "$here" ] || return 0
  while IFS=', ' read -r i rest; do
    case $i in '' | *[!0-9]*) continue ;; esac
    lock_key "$i" "$uuids"
    keys[$key]=1
  done <<<"$uuids"
  [ ${#keys[@]} -gt 0 ] || keyless=1
  host_key "$uuids"
}
# want [NEED [part KEY]] makes the run's record of waiting, or, given
# NEED (the GPUs the run's first job for the host needs there) and a
# record, renames it to say so: its place in the line is kept. "part":
# that job is one part of a job over several hosts, which began to wait
# at KEY (its record's NEED ends in "p", and KEY follows it: see
# share_of).
want() {
  local need=${1:-} key=''
  [ -n "$sharing" ] || return 0
  [ -z "$wanted" ] || [ -n "$need" ] || return 0
  case $need in '' | *[!0-9]*) need=1 ;; esac
  if [ "${2-}" = part ]; then
    need+=p key=${3:-}
    case $key in '' | *[!0-9]*) key=99999999999999999 ;; esac
  fi
  # A parked part whose first job changed is parked no more: what it took
  # is for its turn, if it has one, or let go of (share_tick).
  [ "$need~$key" = "$wneed~$wkey" ] || parked=''
  wneed=$need wkey=$key
  mine
  if [ -n "$wanted" ]; then
    rename_want
    return 0
  fi
  want_name
  wanted=$wname
  mkdir -m 0755 -- "$wanted" 2>/dev/null || wanted=''
  wtag=${EPOCHREALTIME//[!0-9]/} wlast=${EPOCHREALTIME//[!0-9]/} fresh=1
}
# want_name sets wname to the name of the run's record of waiting:
# gpudispatch-want-HOST~PID~RUN~WHO~NEED, then, for a part of a job over
# several hosts, ~KEY, and ~parked once the part is parked (see reserve).
want_name() {
  wname=$pdir/gpudispatch-want-$here~$$~$run~$who~$wneed
  [ -z "$wkey" ] || wname+=~$wkey
  [ -z "$parked" ] || wname+=~parked
}
# rename_want gives the run's record of waiting its name as want_name
# says it, keeping its time (its place in the line).
rename_want() {
  want_name
  if [ "$wname" != "$wanted" ] && [ ! -e "$wname" ] && mv -- "$wanted" "$wname" 2>/dev/null; then
    wanted=$wname
    touch -c -d "@${wtag:0:${#wtag}-6}.${wtag: -6}" -- "$wanted" 2>/dev/null
  fi
}
# older TIME ID TIME2 ID2 reports whether a record of TIME (find's %T@) and
# run ID comes before one of TIME2 and ID2 in the line for what whole
# shares leave.
older() {
  [[ $1 < $3 ]] || { [ "$1" = "$3" ] && [[ $2 < $4 ]]; }
}
# share_of sets share to this run's share of the host's GPUs, or "-" when
# no other run below its own waits for them, why to who waits, base to
# the run's whole share (without a GPU left over), vmin to the time
# of the oldest other run's record of waiting ("" for none), turn to the
# run (UID~RUN) whose turn it is here ("" for none), tneed to the GPUs
# its job needs and, when that job is a part of one over several hosts,
# tkey to when it began to wait, and tyield to 1 when the
# parts parked here whose jobs began to wait later must give their GPUs
# up for it, nwait to the number of
# runs waiting, and tmtime and theld to the time of the first in the line
# and the GPUs its records hold.
share_of() {
  local u t f kind pid r w nd gk pq k n pk first='' all=${#keys[@]} users=0 ours=0 waiting='' pall=0
  local -A owner=() holds=() waits=() need=() part=() gkey=() parks=() nruns=() counted=() named=() fair=() phys=() in=() cannot=()
  turn='' tkey='' tyield=''
  # A run is its user's and its id's: another user's record naming this
  # run's id is another run. Only this host's records count. A share
  # counts GPUs: the MIG instances a run holds of one GPU count once.
  while IFS=' ' read -r u t f; do
    IFS='~' read -r kind pid r w nd gk pq _ <<<"$f"
    pk=${kind#gpudispatch-held-}
    pk=${pk%-mig*}
    case $kind in
      "gpudispatch-want-$here") ;;
      gpudispatch-held-index-*) [ -n "$keyless" ] || [ -n "${keys[$pk]:-}" ] || continue ;;
      gpudispatch-held-*) [ -n "${keys[$pk]:-}" ] || continue ;;
      *) continue ;;
    esac
    [ -d "/proc/$pid" ] || continue
    if [ -n "$keyless" ] && [ -z "${counted[$pk]:-}" ] && [ "$kind" != "gpudispatch-want-$here" ]; then
      counted[$pk]=1
      all=$((all + 1))
    fi
    k=$u~$r
    owner[$k]=$u
    named[$k]="run $r of $w"
    case $kind in
      gpudispatch-want-*)
        waits[$k]=$t
        case $nd in
          *p)
            part[$k]=1 nd=${nd%p}
            case $gk in '' | *[!0-9]*) gk=99999999999999999 ;; esac
            gkey[$k]=$gk
            [ "$pq" != parked ] || parks[$k]=1
            ;;
        esac
        case $nd in '' | *[!0-9]*) nd=1 ;; esac
        need[$k]=$nd
        ;;
      *)
        if [ -z "${phys[$k~$pk]:-}" ]; then
          phys[$k~$pk]=1
          holds[$k]=$((${holds[$k]:-0} + 1))
        fi
        ;;
    esac
  done < <(find "$pdir" -mindepth 1 -maxdepth 1 \( -name 'gpudispatch-held-*~*' -o -name "gpudispatch-want-$here~*" \) -printf '%U %T@ %f\n' 2>/dev/null)
  for k in "${!owner[@]}"; do
    u=${owner[$k]}
    [ -n "${nruns[$u]:-}" ] || users=$((users + 1))
    nruns[$u]=$((${nruns[$u]:-0} + 1))
    in[$k]=1
    # Out of the line (watch_line): the newest there.
    [ -z "${waits[$k]:-}" ] || [ "${lbarred[$u]:-0}" -le "${EPOCHSECONDS:-0}" ] || waits[$k]=9999999999.0
  done
  share=-
  [ "$users" -gt 0 ] && [ "$all" -gt 0 ] || return 0
  base=$((all / users / ${nruns[$EUID]:-1}))
  vmin=''
  for k in "${!waits[@]}"; do
    if [ "$k" != "$EUID~$run" ] && { [ -z "$vmin" ] || [[ ${waits[$k]} < $vmin ]]; }; then
      vmin=${waits[$k]}
    fi
  done
  # A parked part (its records, and its user's own locks, hold all its
  # job needs here) keeps those GPUs as its share, out of the line; the
  # others share the rest.
  for k in "${!parks[@]}"; do
    if [ "${holds[$k]:-0}" -ge "${need[$k]}" ] && [ $((pall + need[$k])) -le "$all" ] && locked_for "$k" "${need[$k]}"; then
      pall=$((pall + need[$k]))
      unset "in[$k]"
    else
      unset "parks[$k]"
    fi
  done
  split $((all - pall))
  # A run whose first job for the host needs more GPUs than its share
  # (a job of several GPUs) cannot use that share: it waits with none,
  # and the others share the GPUs without it; but the first in the line
  # of runs waiting, if it is such a run, has its turn: the GPUs its job
  # needs are its share, and the others share the rest (unless its user's
  # turn here was found forged lately, or the host's GPUs are not known:
  # no GPU could be taken for the turn). When that first is a part of a
  # job over several hosts, or a job that parked parts leave too few
  # GPUs, the turn is the part's whose job began to wait first, of those
  # that wait here (then its run's id: alike on every host).
  for k in "${!waits[@]}"; do
    [ -z "${parks[$k]:-}" ] || continue
    if [ "${need[$k]}" -gt "${fair[$k]}" ]; then
      cannot[$k]=1
      unset "in[$k]"
    fi
    if [ -z "$first" ] || older "${waits[$k]}" "${k#*~}" "${waits[$first]}" "${first#*~}"; then first=$k; fi
  done
  nwait=${#waits[@]} tmtime='' theld=0 tfirst=$first tbase=0
  [ -z "$first" ] || tmtime=${waits[$first]} theld=${holds[$first]:-0} tbase=$((all / users / ${nruns[${owner[$first]}]}))
  if [ -n "$first" ] && [ -z "$keyless" ] && [ -n "${cannot[$first]:-}" ] && [ "${barred[${owner[$first]}]:-0}" -le "${EPOCHSECONDS:-0}" ]; then
    if [ -z "${part[$first]:-}" ] && [ "${need[$first]}" -le $((all - pall)) ]; then
      turn=$first
    else
      for k in "${!cannot[@]}"; do
        if [ -n "${part[$k]:-}" ] && [ "${need[$k]}" -le "$all" ] && [ "${barred[${owner[$k]}]:-0}" -le "${EPOCHSECONDS:-0}" ] &&
          { [ -z "$turn" ] || older "${gkey[$k]}" "${k#*~}" "${gkey[$turn]}" "${turn#*~}"; }; then
          turn=$k
        fi
      done
      if [ -n "$turn" ] && [ "${need[$turn]}" -gt $((all - pall)) ]; then
        # The parts parked here whose jobs began to wait after its job
        # did give their GPUs up for it (tyield): it may be the one they
        # wait for on another host. Those before it are not waited for.
        tyield=1
        for k in "${!parks[@]}"; do
          if older "${gkey[$turn]}" "${turn#*~}" "${gkey[$k]}" "${k#*~}"; then
            pall=$((pall - ${need[$k]}))
            unset "parks[$k]"
            cannot[$k]=1
          fi
        done
      fi
      if [ -n "$turn" ] && [ "${need[$turn]}" -le $((all - pall)) ]; then
        tkey=${gkey[$turn]}
      else
        turn='' tyield=''
      fi
    fi
    [ -z "$turn" ] || tneed=${need[$turn]}
  fi
  if [ ${#cannot[@]} -gt 0 ] || [ ${#parks[@]} -gt 0 ]; then
    n=$pall
    [ -z "$turn" ] || n=$((n + ${need[$turn]}))
    split $((all - n))
    for k in "${!cannot[@]}"; do fair[$k]=0; done
    for k in "${!parks[@]}"; do fair[$k]=${need[$k]}; done
    [ -z "$turn" ] || fair[$turn]=${need[$turn]}
  fi
  for k in "${!owner[@]}"; do
    n=${fair[$k]}
    if [ "$k" = "$EUID~$run" ]; then
      ours=$n
    elif [ -n "${waits[$k]:-}" ] && [ "${holds[$k]:-0}" -lt "$n" ]; then
      waiting=1
      why+="${why:+, }${named[$k]} waits with ${holds[$k]:-0}"
      [ "$k" != "$turn" ] || why+=" (its turn: a job of $n GPUs)"
    fi
  done
  [ -z "$waiting" ] || share=$ours
}
# locked_for UID~RUN N says whether that run's user's own locks hold N of
# the host's GPUs, as its parked record says (records, anyone's to forge,
# prove nothing: a forged one would have the others give up GPUs that
# stand free). It looks (look_locks) once every four seconds per run; this
# run's own record is its own word.
locked_for() {
  local now=${EPOCHSECONDS:-0} seen=${plooked[$1]:-}
  [ "$1" != "$EUID~$run" ] || return 0
  if [ -z "$seen" ] || [ $((now - ${seen% *})) -ge 4 ]; then
    look_locks "${1%%~*}"
    seen="$now $((theirs >= $2))"
    plooked[$1]=$seen
  fi
  [ "${seen#* }" = 1 ]
}
# split N sets fair, for each run of in, to its share of N GPUs: equal
# between the users of those runs (a user is a record's owner, not what
# its name says), then equal between one user's runs (none, where they
# are more than its GPUs); what whole shares leave goes one GPU at a time
# to whoever waits longest: between users (a user's oldest record, then
# its run's id) first, then between a user's runs (a run's record, then
# its id). It reads share_of's owner and waits.
split() {
  local n=$1 k u users=0 per left best
  local -A nr=() usince=() uwho=() utot=() uextra=() rleft=() extra=()
  for k in "${!in[@]}"; do
    u=${owner[$k]}
    [ -n "${nr[$u]:-}" ] || users=$((users + 1))
    nr[$u]=$((${nr[$u]:-0} + 1))
  done
  [ "$users" -gt 0 ] || return 0
  per=$((n / users))
  left=$((n - per * users))
  for k in "${!in[@]}"; do
    [ -n "${waits[$k]:-}" ] || continue
    u=${owner[$k]}
    if [ -z "${usince[$u]:-}" ] || older "${waits[$k]}" "${k#*~}" "${usince[$u]}" "${uwho[$u]}"; then
      usince[$u]=${waits[$k]} uwho[$u]=${k#*~}
    fi
  done
  for u in "${!nr[@]}"; do utot[$u]=$per; done
  while [ "$left" -gt 0 ]; do
    best=''
    for u in "${!usince[@]}"; do
      [ -z "${uextra[$u]:-}" ] || continue
      if [ -z "$best" ] || older "${usince[$u]}" "${uwho[$u]}" "${usince[$best]}" "${uwho[$best]}"; then best=$u; fi
    done
    [ -n "$best" ] || break
    uextra[$best]=1 utot[$best]=$((utot[$best] + 1)) left=$((left - 1))
  done
  for k in "${!in[@]}"; do
    u=${owner[$k]}
    n=$((utot[$u] / nr[$u]))
    fair[$k]=$n
    rleft[$u]=$((${rleft[$u]:-${utot[$u]}} - n))
  done
  while :; do
    best=''
    for k in "${!in[@]}"; do
      [ -n "${waits[$k]:-}" ] || continue
      if [ "${rleft[${owner[$k]}]}" -le 0 ] || [ -n "${extra[$k]:-}" ]; then continue; fi
      if [ -z "$best" ] || older "${waits[$k]}" "${k#*~}" "${waits[$best]}" "${best#*~}"; then best=$k; fi
    done
    [ -n "$best" ] || break
    extra[$best]=1 fair[$best]=$((fair[$best] + 1))
    rleft[${owner[$best]}]=$((rleft[${owner[$best]}] - 1))
  done
}
# reserve takes, for the run whose turn it is here (this one), each GPU
# of the host that is free, and tells the coordinator it is: the GPUs of
# a turn wait for its job locked, so that no run that takes no share
# takes them meanwhile, and no other holder finds them idle under it
# (watch_turn). The coordinator's lock of one is answered at once (take).
#
# A turn whose GPUs were all taken ten seconds ago, and that its
# coordinator did not take up (its job cannot run on them: another's
# process on one, with --skip-busy), is given up: the run has no turn here
# for ten minutes. A part of a job over several hosts parks instead.
reserve() {
  local i rest rec why now=${EPOCHSECONDS:-0}
  [ -z "$keyless" ] || return 0
  if [ ${#reserved[@]} -ge "$tneed" ]; then
    park
    [ -z "$wkey" ] || return 0
    if [ $((now - ${rfull:=$now})) -ge 10 ]; then
      barred[$EUID]=$((now + 600))
      unreserve
    fi
    return 0
  fi
  rfull=''
  while IFS=', ' read -r i rest; do
    case $i in '' | *[!0-9]*) continue ;; esac
    [ -z "${fds[i]-}" ] || continue
    name_lock "$i"
    grab "$i" turn || continue
    reserved[i]=1
    if [ -n "${watchers[i]-}" ]; then
      kill "${watchers[i]}" 2>/dev/null
      unset 'watchers[i]'
    fi
    _g_encode rec free "$i"
    said+=("$rec")
  done <<<"$uuids"
  flush
  [ ${#reserved[@]} -lt "$tneed" ] || park
}
# park: a part of a job over several hosts whose GPUs here are all taken
# waits for its other hosts, parked (its record says so: see share_of).
park() {
  if [ -n "$wkey" ] && [ -z "$parked" ]; then
    parked=1
    rename_want
  fi
}
# unreserve lets go of the GPUs taken for a turn that is over, which the
# coordinator did not take.
unreserve() {
  local g
  for g in "${!reserved[@]}"; do release "$g"; done
  reserved=() rfull=''
  flush
  unpark
}
# unpark puts a parked part back in the line, as a run that waits: its
# GPUs here were taken by its job, or given up.
unpark() {
  [ -n "$parked" ] || return 0
  parked=''
  [ -z "$wanted" ] || rename_want
}
# watch_turn voids the turn of another run here when a GPU stands free and
# unlocked under it at looks four seconds apart: the run of a turn locks
# the GPUs as they free up (reserve), so such a turn is no run's (a record
# forged to have it); and when the turn's run holds the GPUs the turn is
# for (by its records, and by locks of its user's own: another run of the
# user's may hold some as it drains), while another run waits, at looks
# six seconds apart between which its record's time never moved: a run whose job
# runs above its share moves back in the line at each look (its GPU time
# above it), so such a turn is a record whose time is forged to stay
# first (a run may keep its turn for long, for the time others had its
# share: it moves back all along). Either way its
# user has no turn here for ten minutes. It looks every other second (a
# find, and a flock(1) per lock of each GPU this run does not hold:
# records, anyone's to forge, prove nothing).
watch_turn() {
  local i tu=${turn%%~*} now=${EPOCHSECONDS:-0}
  [ "$turn" = "$tturn" ] || tturn=$turn served='' smoved=''
  [ $((now - tlook)) -ge 2 ] || return 0
  tlook=$now
  look_locks "$tu"
  for i in "${!free[@]}"; do
    if [ -z "${free[i]}" ]; then
      unset "idle[$i]"
    elif [ $((now - ${idle[$i]:=$now})) -ge 4 ]; then
      barred[$tu]=$((now + 600))
      idle=()
      return
    fi
  done
  if [ "$theirs" -lt "$tneed" ] || [ "$theld" -lt "$tneed" ] || [ "$nwait" -lt 2 ] || [ "$tmtime" != "${smoved:-$tmtime}" ]; then
    served='' smoved=''
  elif [ $((now - ${served:=$now})) -ge 6 ]; then
    barred[$tu]=$((now + 600))
    served='' smoved=''
  fi
  [ -z "$served" ] || smoved=$tmtime
}
# look_locks USER looks at the lock of each GPU of the host by flock(1) on
# its lock files (records, anyone's to forge, prove nothing): free, by
# GPU index, says "1" for a GPU free and unlocked (this run's are not),
# and theirs counts the GPUs that locks of USER's own hold.
look_locks() {
  local i rest e f mine
  local -A owned=()
  free=() theirs=0
  while IFS= read -r f; do owned[$f]=1; done < <(find "$pdir" -mindepth 1 -maxdepth 1 -name 'gpudispatch-gpu-*' -user "$1" -print 2>/dev/null)
  while IFS=', ' read -r i rest; do
    case $i in '' | *[!0-9]*) continue ;; esac
    lock_key "$i" "$uuids"
    free[i]=1 mine=''
    if [ -n "${fds[i]-}" ]; then
      free[i]=''
    else
      for e in "$pdir/gpudispatch-gpu-$key".* "$pdir/gpudispatch-gpu-$key"-mig*.*; do
        if [ ! -e "$e" ] || ! open_lock "$e"; then continue; fi
        if ! flock -n -s "$lfd"; then
          free[i]=''
          [ -z "${owned[$e]:-}" ] || mine=1
        fi
        exec {lfd}<&-
      done
    fi
    [ -z "$mine" ] || theirs=$((theirs + 1))
  done <<<"$uuids"
}
# watch_line takes the line's first out of it for ten minutes (lbarred:
# its user's records count as the newest there) when that run, another
# than this one, holds more GPUs than its whole share, by its records and
# by locks of its user's own, while another run waits, at looks six
# seconds apart between which its record's time never moved: a run above
# its whole share moves back at each look (charge), so such a place is a
# forged time's, kept to take the GPUs that whole shares leave over. A
# run whose turn it is holds GPUs for its job as they free up, and does
# not move back for them until its job has them: watch_turn looks at it.
watch_line() {
  local now=${EPOCHSECONDS:-0} tu=${tfirst%%~*}
  if [ -z "$tfirst" ] || [ "$tfirst" = "$EUID~$run" ] || [ "$tfirst" = "$turn" ] || [ "$nwait" -lt 2 ] || [ "$theld" -le "$tbase" ]; then
    lfirst='' lsince=''
    return 0
  fi
  if [ "$tfirst" != "$lfirst" ] || [ "$tmtime" != "$lmoved" ]; then
    lfirst=$tfirst lsince=$now lmoved=$tmtime
    return 0
  fi
  [ $((now - lsince)) -ge 6 ] || return 0
  look_locks "$tu"
  [ "$theirs" -le "$tbase" ] || lbarred[$tu]=$((now + 600))
  lfirst='' lsince=''
}
# charge moves this run back in the line by the GPU time it held above its
# whole share since it was last charged, while another run waited (as at
# the last look): at each look, and as its locks change between looks
# (grab, release, a GPU of its turn that its job takes), so that what it
# held between two looks counts whole, a job shorter than a look's second
# too. The GPUs taken for its turn count once its job has them. The
# record's time follows at the next look.
charge() {
  local now=${EPOCHREALTIME//[!0-9]/} g n=0
  local -A pg=()
  if [ -n "$wanted" ] && [ -n "$owaiting" ]; then
    for g in "${!fds[@]}"; do
      [ -z "${reserved[g]-}" ] || continue # taken for a turn, with no job yet
      ((g < 65536)) || g=$(((g - 65536) / 256))
      [ -n "${pg[$g]:-}" ] || n=$((n + 1))
      pg[$g]=1
    done
    if [ "$n" -gt "$base" ]; then
      wtag=$((wtag + (now - wlast) * (n - base))) moved=1
    fi
  fi
  wlast=$now
}
# share_tick renews (or lets go) this run's own record and says its share
# when it changed.
share_tick() {
  local f others='' share=- why=
  [ -n "$sharing" ] || return 0
  charge
  turn=''
  if [ ${#fds[@]} -gt 0 ] || [ -n "$wanted" ]; then
    mine
    for f in "$pdir"/gpudispatch-want-"$here"~*; do
      if [ -e "$f" ] && [ "$f" != "$wanted" ]; then
        others=1
        break
      fi
    done
  fi
  # A run that waits looks even with no other run waiting: it may have
  # its turn.
  if [ -n "$others$wanted" ]; then share_of; else tfirst=''; fi
  # The run's place in the line (its record's time, in microseconds
  # here): new, just after the oldest (from this look on); holding more
  # than its whole share, moved back by the GPU time above it (charge).
  owaiting=$others
  if [ -n "$wanted" ]; then
    local v
    if [ -n "$others" ]; then
      if [ -n "$fresh" ] && [ -n "$vmin" ]; then
        # Just after the oldest (a microsecond, past what its time has
        # below one).
        v=${vmin#*.}000000
        v=$((10#${vmin%.*}${v:0:6} + 1))
        if [ "$v" -lt "$wtag" ]; then
          wtag=$v moved=1
        fi
      fi
      fresh=''
    fi
    [ -z "$moved" ] || touch -c -d "@${wtag:0:${#wtag}-6}.${wtag: -6}" -- "$wanted" 2>/dev/null
    moved=''
  fi
  if [ -n "$turn" ] && [ "$turn" = "$EUID~$run" ]; then
    reserve
  elif [ -n "$parked" ] && [ ${#reserved[@]} -gt 0 ] && [ -n "$wanted" ] &&
    { [ -z "$tyield" ] || ! older "$tkey" "${turn#*~}" "$wkey" "$run"; }; then
    : # parked (its job may be taking the GPUs): kept, unless a part whose job waits longer needs them
  else
    [ ${#reserved[@]} -eq 0 ] || unreserve
    unpark
    if [ -n "$turn" ]; then watch_turn; else idle=(); fi
    watch_line
  fi
  if [ "$share $why" != "$shared" ]; then
    shared="$share $why"
    _g_send share "$share" "$why"
  fi
}
# On the way out, every record goes at once (one process), then the locks
# with the holder.
trap 'set -- "${recs[@]}" "${gone[@]}" ${wanted:+"$wanted"}; [ $# -eq 0 ] || rmdir -- "$@" 2>/dev/null; [ ${#watchers[@]} -eq 0 ] || kill "${watchers[@]}" 2>/dev/null' EXIT
trap 'exit 143' TERM
# Requests, waited for a second at a time (or the heartbeat's timeout,
# when that is shorter): as many silent waits as make the heartbeat's
# timeout end the loop. The share is looked at once a second, whatever
# comes.
tick=1 ticks=${hb%.*} quiet=0 ticked=$SECONDS
case $ticks in '' | 0) tick=$hb ticks=1 ;; esac
[ "$hb" = "$ticks" ] || [ "$tick" != 1 ] || ticks=$((ticks + 1))
while :; do
  _g_record "$tick"
  case $? in
    0) quiet=0 ;;
    1) break ;;
    *) quiet=$((quiet + 1)) ;;
  esac
  if [ "$SECONDS" != "$ticked" ]; then
    ticked=$SECONDS
    share_tick
  fi
  if [ "$quiet" -gt 0 ]; then
    [ "$quiet" -lt "$ticks" ] || break
    continue
  fi
  case ${_g_f[0]-} in
    lock) take "${_g_f[1]-}" ;;
    release)
      release "${_g_f[1]-}"
      _g_encode rec released "${_g_f[1]-}"
      said+=("$rec")
      ;;
    want) want "${_g_f[1]-}" "${_g_f[2]-}" "${_g_f[3]-}" ;;
    unwant)
      if [ -n "$wanted" ]; then
        rmdir -- "$wanted" 2>/dev/null
        wanted=''
      fi
      ;;
    exit)
      flush
      exit 0
      ;;
  esac
  read -r -t 0 || flush
done
# Silence, or the end of stdin (which read -t 0 takes for input): what
# is left is done, and said to no one. The run waits for nothing any more.
said=()
flush
if [ -n "$wanted" ]; then
  rmdir -- "$wanted" 2>/dev/null
  wanted=''
fi
# nap sleeps $1 seconds in a child that holds no lock, so that a
# takeover's kill of this shell frees them at once.
nap() {
  (
    for fd in "${fds[@]}" "${shut[@]}"; do exec {fd}<&-; done
    exec sleep "$1"
  ) </dev/null >/dev/null 2>&1 &
  wait $!
}
# running_on reports whether a job of this run runs on GPU $1: a record of
# the user's job shells (~/.gpudispatch/jobs/*.job: tag, files, shell pid,
# mark, offsets, job pid, boot, start, GPUs as CUDA_VISIBLE_DEVICES has
# them: a MIG instance by its UUID) names it, and its process group is
# alive.
running_on() {
  local rec jtag jpid gpus want=${migs[$1]:-$1}
  for rec in "$_g_d_spool"/*.job; do
    [ -s "$rec" ] || continue
    IFS=' ' read -r jtag _ _ _ _ _ jpid _ _ gpus _ <"$rec" || continue
    case $jtag in "$run"-*) ;; *) continue ;; esac
    case ",$gpus," in *",$want,"*) ;; *) continue ;; esac
    kill -0 -- -"$jpid" 2>/dev/null && return 0
  done
  return 1
}
# The coordinator went silent. A job of the run runs on without it: its GPU
# stays locked until it ends, and each other lock goes after the linger.
# The records of the locks kept say so ("~gone"), for whoever finds them
# locked.
nap "$linger"
for g in "${!fds[@]}"; do
  if ((g >= 65536)) && [ ${#migs[@]} -eq 0 ]; then read_migs; fi
done
for g in "${!fds[@]}"; do
  if mv -- "${recs[g]}" "${recs[g]}~gone" 2>/dev/null; then recs[g]=${recs[g]}~gone; fi
done
while [ ${#fds[@]} -gt 0 ]; do
  for g in "${!fds[@]}"; do
    running_on "$g" || release "$g"
  done
  flush
  [ ${#fds[@]} -eq 0 ] || nap 2
done
