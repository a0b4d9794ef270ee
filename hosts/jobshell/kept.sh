# gpudispatch kept-jobs lister. Run by bash on a machine, it lists the
# user's jobs that job shells (shell.sh) keep there with no coordinator
# reading them, a record each (spawn.Record, written by _g_send): "job",
# the job's tag, "running" (its coordinator is gone and it runs on) or
# "ended" (it ended, and its output waits for a coordinator), when it
# started (seconds since 1970), its GPUs, then the about line its
# coordinator gave. A job whose shell still has its coordinator (the
# shell's parent is sshd or gpudispatch) is not listed. First, the record
# "logind" "kill-at-logout" when systemd-logind kills the user's
# processes as their last session ends (KillUserProcesses=yes) and the user
# has no linger: jobs left with no coordinator would die then; or "logind"
# "silent" when logind did not answer within $1 seconds (a stuck
# logind or D-Bus holds no host's opening beyond that; where timeout(1) is
# missing, the ask is not bounded). logind's answer (or that there is no
# system bus to ask) is kept for the boot, until one of its
# configuration files changes (~/.gpudispatch/logind); linger is
# the file logind keeps for it ($GPUDISPATCH_LINGER_DIR in tests).
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
spool=$_g_d_spool
if command -v busctl >/dev/null; then
  asked=${spool%/*}/logind
  boot=
  IFS= read -r boot </proc/sys/kernel/random/boot_id 2>/dev/null
  kill=
  if [ -n "$boot" ] && [ -f "$asked" ] && IFS=' ' read -r was cached <"$asked" && [ "$was" = "$boot" ]; then
    kill=$cached
    shopt -s nullglob
    for f in /etc/systemd/logind.conf /{etc,run,usr/local/lib,usr/lib}/systemd/logind.conf.d{,/*.conf}; do
      if [ "$f" -nt "$asked" ]; then
        kill=
        break
      fi
    done
    shopt -u nullglob
  fi
  if [ -z "$kill" ]; then
    limit=()
    if command -v timeout >/dev/null; then limit=(timeout -k 1 "${1:-20}"); fi
    kill=$("${limit[@]}" busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager KillUserProcesses 2>/dev/null </dev/null)
    case $? in
      124 | 137) kill=silent ;;
      *)
        # No answer at all (no system bus here) is kept too, as "-".
        kill=${kill:--}
        if [ -n "$boot" ] && [ ! -d "${spool%/*}" ]; then mkdir -p -- "${spool%/*}" 2>/dev/null; fi
        if [ -n "$boot" ] && [ -O "${spool%/*}" ] && [ ! -L "${spool%/*}" ]; then printf '%s %s\n' "$boot" "$kill" >"$asked"; fi
        ;;
    esac
  fi
  case $kill in
    silent) _g_send logind silent ;;
    "b true") [ -e "${GPUDISPATCH_LINGER_DIR:-/var/lib/systemd/linger}/${USER:-$(id -un)}" ] || _g_send logind kill-at-logout ;;
  esac
fi
for rec in "$spool"/*.job; do
  [ -s "$rec" ] || continue
  {
    IFS=' ' read -r jtag _ pid _ _ _ jpid _ start gpus _ && IFS= read -r about
  } <"$rec" || continue
  state=ended
  if kill -0 -- -"$jpid" 2>/dev/null; then
    state=running
  fi
  if kill -0 "$pid" 2>/dev/null; then
    parent=$(ps -o ppid= -p "$pid" 2>/dev/null)
    case $(ps -o comm= -p "${parent// /}" 2>/dev/null) in
      sshd* | gpudispatch*) continue ;;
    esac
  fi
  _g_send job "$jtag" "$state" "$start" "$gpus" "$about"
done
