# gpudispatch's agent on a Slurm cluster's login node: one per run and
# cluster, on one SSH session (or here, for a local login node). It submits
# the run's jobs, asks squeue about all of them once per poll, and streams
# the output of the running ones back. It never cancels a job on its own: a
# coordinator that falls silent or goes away leaves the run's jobs running
# in Slurm, and the agent exits; a later agent (the same run back, or a
# resumed one) tracks them again ("t") from the bytes that are home.
#
# stdin, after this code, records (spawn.Record, read by _g_record). First
# the agent's arguments: the run's tag prefix (_a_run), the cluster workdir
# (_a_wd, "~/" is home), the poll (_a_poll, seconds), the silence
# (_a_silence, seconds without a word from the coordinator after which the
# agent exits, leaving the jobs to Slurm), the tick (_a_tick, seconds, may
# be fractional: how often output is looked at), then the common sbatch
# options (_a_args). _a_run "check": only see whether sbatch would take a
# job, and say r or F; _a_run "cancel-TAG": only cancel the job tagged TAG,
# and say r or F.
#
# Then one command a record, its fields:
#   h                                  heartbeat
#   s TAG GPUS NODES TIME SCRIPT       submit that batch script, GPUS on each of
#                                      NODES nodes (TIME "-": none)
#   t TAG ID OUT ERR [OUT ERR]...      track a job submitted by an earlier agent,
#                                      OUT/ERR bytes of its output already home
#                                      (ID "-": not known, found by its name),
#                                      then of its parts 1.. (a job of nodes)
#   c ID...                            scancel those jobs
#   q                                  quit (the jobs still tracked run on)
# stdout, records (written by _g_send; O and E are followed by their bytes):
#   r                                  ready
#   S TAG ID | F TAG message           submitted | sbatch refused (one line)
#   P TAG REASON                       pending in Slurm, and why
#   R TAG START                        running since START (seconds since
#                                      1970, "-" if Slurm does not say)
#   O TAG N | E TAG N  + N bytes       new stdout | stderr bytes (TAG.rankK:
#                                      of part K of a job over several nodes,
#                                      which writes TAG.rankK.out and .err)
#   X TAG STATE CODE                   ended: Slurm's last state (GONE when it
#                                      left the queue), exit file's code or -
# A later agent of the same run writes its pid to .gpd-RUN.agent: an
# earlier one that sees it exits without cancelling anything.
# shellcheck disable=SC2154 # _g_f and $_g_x_* come from spawn/prelude.sh, sent first
trap '' PIPE
_g_record && [ "${#_g_f[@]}" -ge 5 ] || exit "$_g_x_unread"
_a_run=${_g_f[0]} _a_wd=${_g_f[1]} _a_poll=${_g_f[2]} _a_silence=${_g_f[3]} _a_tick=${_g_f[4]}
_a_args=("${_g_f[@]:5}")
set -f
export LC_ALL=C
_a_home=$HOME
# shellcheck disable=SC2088 # a literal ~ from the inventory
case $_a_wd in "~/"*) _a_wd=$_a_home/${_a_wd#"~/"} ;; "~") _a_wd=$_a_home ;; esac
if ! { mkdir -p -- "$_a_wd" && cd -- "$_a_wd"; }; then
  _g_send F - "cannot use workdir $_a_wd"
  exit 1
fi
# The login shell's whole environment, as jobs get it: clusters set up
# Slurm in the profile (PATH from /etc/profile.d, Lmod's module load slurm
# exporting SLURM_CONF and LD_LIBRARY_PATH). Its exports, after a marker that
# the profile's own output cannot hold, are taken over here.
# shellcheck disable=SC2016 # expanded by the login shell
if _a_env=$("${SHELL:-/bin/bash}" -lc 'printf "\n@gpd-env@\n"; export -p' </dev/null 2>/dev/null); then
  case $_a_env in
    *@gpd-env@*) eval "${_a_env##*@gpd-env@}" 2>/dev/null ;;
  esac
fi
unset -v _a_env
export LC_ALL=C
if [ "$_a_run" = check ]; then
  # Would the cluster take a job with these options?
  if _a_out=$(sbatch --test-only --gres=gpu:1 "${_a_args[@]}" --wrap=true 2>&1); then
    # What gpudispatch hosts shows: the partition's nodes by state with
    # their GPUs, and the user's jobs in the queue by state.
    _g_send I partition "$(sinfo --noheader --partition="${_a_args[0]#--partition=}" --format='%a %D %T %G' 2>&1 | tr '\n' ';')"
    _g_send I queue "$(squeue --me --noheader --format='%T' 2>&1 | sort | uniq -c | tr -s ' \n' '  ')"
    _g_send r
  else
    _g_send F - "${_a_out//$'\n'/ }"
  fi
  exit 0
fi
case $_a_run in cancel-*)
  # A cancel that did not reach the cluster when it was given.
  if _a_out=$(scancel --me --name="gpd-${_a_run#cancel-}" 2>&1); then
    _g_send r
  else
    _g_send F - "${_a_out//$'\n'/ }"
  fi
  exit 0
esac
_a_pidfile=.gpd-$_a_run.agent
echo $$ >"$_a_pidfile.$$" && mv -f "$_a_pidfile.$$" "$_a_pidfile"
declare -A _a_id _a_out _a_err _a_state _a_why _a_nodes
_a_heard=$SECONDS
_a_polled=-1000000
_a_tailed=-1
_a_eof=
_g_send r

_a_sbatch() { # TAG GPUS NODES TIME SCRIPT
  local tag=$1 out time=() nodes=()
  [ "$4" = - ] || time=(--time="$4")
  [ "$3" = 1 ] || nodes=(--nodes="$3" --ntasks-per-node=1)
  if out=$(sbatch --parsable --no-requeue --job-name="gpd-$tag" --output="$tag.out" --error="$tag.err" \
    --gres="gpu:$2" "${nodes[@]}" "${time[@]}" "${_a_args[@]}" <<<"$5" 2>&1); then
    out=${out%%;*}
    _a_id[$tag]=$out _a_out[$tag]=0 _a_err[$tag]=0 _a_state[$tag]=PENDING _a_why[$tag]='' _a_nodes[$tag]=$3
    _a_parts "$tag"
    _g_send S "$tag" "$out"
  else
    _g_send F "$tag" "${out//$'\n'/ }"
  fi
}

_a_send() { # KIND TAG FILE OFFSETVAR: the bytes of FILE past the offset
  local -n off=$4
  local size
  size=$(stat -c %s -- "$3" 2>/dev/null) || return 0
  if ((size > off)); then
    _g_send "$1" "$2" "$((size - off))"
    tail -c +$((off + 1)) -- "$3" | head -c $((size - off))
    off=$size
  fi
}

_a_parts() { # TAG [OUT ERR]...: the offsets of its parts 1.. (0 when not given)
  local tag=$1 k
  shift
  for ((k = 1; k < ${_a_nodes[$tag]:-1}; k++)); do
    _a_out[$tag.rank$k]=${1:-0} _a_err[$tag.rank$k]=${2:-0}
    if [ $# -ge 2 ]; then shift 2; else set --; fi
  done
}

_a_files() { # TAG: sets _a_f to its output files, and its parts'
  local k
  _a_f=("$1.out" "$1.err")
  for ((k = 1; k < ${_a_nodes[$1]:-1}; k++)); do _a_f+=("$1.rank$k.out" "$1.rank$k.err"); done
}

_a_flush() { # TAG
  local f
  _a_files "$1"
  for f in "${_a_f[@]}"; do
    if [ "${f##*.}" = out ]; then
      _a_send O "${f%.*}" "$f" "_a_out[${f%.*}]"
    else
      _a_send E "${f%.*}" "$f" "_a_err[${f%.*}]"
    fi
  done
}

_a_tail() { # the running jobs' new output; one stat for all of them
  local tag size name files=()
  for tag in "${!_a_state[@]}"; do
    if [ "${_a_state[$tag]}" = RUNNING ]; then
      _a_files "$tag"
      files+=("${_a_f[@]}")
    fi
  done
  if [ ${#files[@]} -eq 0 ]; then return; fi
  while read -r size name; do
    tag=${name%.*}
    if [ "${name##*.}" = out ]; then
      ((size > _a_out[$tag])) && _a_send O "$tag" "$name" "_a_out[$tag]"
    else
      ((size > _a_err[$tag])) && _a_send E "$tag" "$name" "_a_err[$tag]"
    fi
  done < <(stat -c '%s %n' -- "${files[@]}" 2>/dev/null)
}

_a_end() { # TAG STATE START
  local code=-
  # A job that ran between two polls: it wrote its exit file, or Slurm
  # timed it.
  if [ "${_a_state[$1]}" != RUNNING ] && { [ -e "$1.exit" ] || [ "$2" = TIMEOUT ]; }; then
    _g_send R "$1" "$3"
  fi
  _a_flush "$1"
  if [ -r "$1.exit" ]; then read -r code <"$1.exit" || code=-; fi
  _g_send X "$1" "$2" "${code:--}"
  local k
  for ((k = 1; k < ${_a_nodes[$1]:-1}; k++)); do unset "_a_out[$1.rank$k]" "_a_err[$1.rank$k]"; done
  unset "_a_id[$1]" "_a_out[$1]" "_a_err[$1]" "_a_state[$1]" "_a_why[$1]" "_a_nodes[$1]"
}

_a_poll() {
  local out id name state start why tag
  declare -A seen=()
  if [ ${#_a_id[@]} -eq 0 ]; then return; fi
  # One squeue for all of the run's jobs: --me and every state, so that a job
  # that just ended is seen with its last state. When squeue fails, nothing
  # is concluded.
  # SLURM_TIME_FORMAT=%s: start times in seconds since 1970, whatever the
  # login node's time zone.
  out=$(SLURM_TIME_FORMAT=%s squeue --me --states=all --noheader --format='%i|%j|%T|%S|%r' 2>/dev/null) || return 0
  while IFS='|' read -r id name state start why; do
    tag=${name#gpd-}
    if [ "$name" = "$tag" ] || [ -z "${_a_id[$tag]-}" ]; then continue; fi
    if [ "${_a_id[$tag]}" = - ]; then
      # Submitted by an agent that died before it could say so.
      _a_id[$tag]=$id
      _g_send S "$tag" "$id"
    elif [ "${_a_id[$tag]}" != "$id" ]; then
      continue
    fi
    seen[$tag]=1
    case $start in *[!0-9]* | "") start=- ;; esac
    case $state in
      PENDING | CONFIGURING | REQUEUED | RESIZING | SUSPENDED | REQUEUE_HOLD | REQUEUE_FED)
        if [ "$why" != "${_a_why[$tag]}" ] || [ "${_a_state[$tag]}" != PENDING ]; then
          _g_send P "$tag" "$why"
        fi
        _a_state[$tag]=PENDING _a_why[$tag]=$why
        ;;
      RUNNING | COMPLETING | STAGE_OUT | SIGNALING)
        if [ "${_a_state[$tag]}" != RUNNING ]; then _g_send R "$tag" "$start"; fi
        _a_state[$tag]=RUNNING
        ;;
      *) _a_end "$tag" "$state" "$start" ;;
    esac
  done <<<"$out"
  for tag in "${!_a_id[@]}"; do
    if [ -z "${seen[$tag]-}" ]; then _a_end "$tag" GONE -; fi
  done
}

while :; do
  _g_f=()
  if [ -z "$_a_eof" ]; then
    if _g_record "$_a_tick"; then
      _a_heard=$SECONDS
    elif (($? <= 128)); then
      _a_eof=1 # the coordinator's side is closed: watch on until the silence limit
    else
      _a_tailed=-1 # a quiet tick: look at the output now
    fi
  else
    sleep "$_a_tick"
    _a_tailed=-1
  fi
  read -r _a_owner <"$_a_pidfile" 2>/dev/null
  if [ "${_a_owner:-}" != $$ ]; then exit 0; fi # a later agent took over
  set -- "${_g_f[@]}"
  case ${1-} in
    s) _a_sbatch "$2" "$3" "$4" "$5" "$6" ;;
    t)
      _a_id[$2]=$3 _a_out[$2]=$4 _a_err[$2]=$5 _a_state[$2]=PENDING _a_why[$2]='' _a_nodes[$2]=$((($# - 5) / 2 + 1))
      _a_parts "$2" "${@:6}"
      ;;
    c) shift && scancel -- "$@" 2>/dev/null ;;
    q)
      rm -f -- "$_a_pidfile"
      exit 0
      ;;
  esac
  if ((SECONDS - _a_heard >= _a_silence)); then
    # The coordinator is gone: the jobs run on in Slurm.
    rm -f -- "$_a_pidfile"
    exit 0
  fi
  if ((SECONDS - _a_polled >= _a_poll)); then
    _a_polled=$SECONDS
    _a_poll
  fi
  if ((_a_tailed != SECONDS)); then
    _a_tailed=$SECONDS
    _a_tail
  fi
done
