# gpudispatch kept-jobs lister. Run by bash on a machine, it lists the
# user's jobs that job shells (shell.sh) keep there with no coordinator
# reading them: one line each, the job's tag, "running" (its coordinator
# is gone and it runs on) or "ended" (it ended, and its output waits for a
# coordinator), when it started (seconds since 1970), its GPUs, then the
# about line its coordinator gave. A job whose shell still has its
# coordinator (the shell's parent is sshd or gpudispatch) is not listed.
# First, the line "!kill-at-logout" when systemd-logind kills the user's
# processes as their last session ends (KillUserProcesses=yes) and the user
# has no linger: jobs left with no coordinator would die then; or the line
# "!logind-silent" when logind did not answer within $1 seconds (a stuck
# logind or D-Bus holds no host's opening beyond that; where timeout(1) is
# missing, the ask is not bounded).
limit=()
if command -v timeout >/dev/null; then limit=(timeout -k 1 "${1:-20}"); fi
if command -v busctl >/dev/null && command -v loginctl >/dev/null; then
  kill=$("${limit[@]}" busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager KillUserProcesses 2>/dev/null </dev/null)
  case $? in
  124 | 137) echo '!logind-silent' ;;
  *)
    # Linger matters only where logind kills: most hosts are asked once.
    if [ "$kill" = "b true" ]; then
      linger=$("${limit[@]}" loginctl show-user "$(id -un)" --property=Linger --value 2>/dev/null </dev/null)
      case $? in
      124 | 137) echo '!logind-silent' ;;
      *) if [ "$linger" != yes ]; then echo '!kill-at-logout'; fi ;;
      esac
    fi
    ;;
  esac
fi
spool=$HOME/.gpudispatch/jobs
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
  printf '%s %s %s %s %s\n' "$jtag" "$state" "$start" "$gpus" "$about"
done
