# gpudispatch job shell. Run by bash on the job's machine, it runs the jobs its
# coordinator sends, one after another. Everything arrives on stdin, so a job
# line reaches the login shell byte for byte with no quoting at all. $1 is
# the shell's tag.
#
# stdin: records (spawn.Record: eight digits that give a header's length,
# the header, the fields' byte lengths, then the fields; bash reads a pipe
# a byte per system call up to a delimiter, but a known length in one
# call). First, the shell's start: grace (seconds), the set-up's limit
# (seconds, 0 for none), login ("slot", "share", "copy", "job" or "none"),
# then the prelude's: interactive ("1" or empty), workdir, conda env, venv,
# modules (a line each), setup, and one "NAME=value" per host variable.
# For "copy", then a record of the seven parts of a state. Then a letter
# each: "c" to cancel the running job, "q" to end the shell (what is kept
# of its last job is home), and "j" for a job, followed by the job's
# record: end mark, tag, about (a line for whoever lists the kept jobs),
# timeout (seconds, 0 for none), rotate ("1" to start new stream files),
# the byte offsets at which the job's output starts in the stream files
# (stdout, stderr), script, its environment as bash code (a "builtin
# export" line per variable, quoted by the coordinator), and its GPUs for
# its record ("-" for none). A job's record is read in line, not by
# _g_record: three reads and no call.
#
# Login shells: where the login shell is bash and login is "slot", this shell
# is itself the login shell: it reads the profile once (/etc/profile, then
# the first of ~/.bash_profile, ~/.bash_login, ~/.profile), with no input
# and its output thrown away, and each job is a fork (made by the starter,
# a bash of its own beside this one: see _g_scode). The profile's variables
# stay in this shell as they are, and the starter is given them; its
# functions, aliases, options and traps are saved aside (through a file in
# this shell's directory) and put away, so that this script runs in a
# clean shell: the starter defines the functions once, and each job's fork
# takes the rest back, after its own environment (so a profile cannot
# override CUDA_VISIBLE_DEVICES). A fork costs no bash start: the job's $$
# is the starter's, as in any subshell; its BASHPID, RANDOM and SECONDS
# are its own. A TERM to the starter (a job's "kill $$") or to this shell
# (its "kill $PPID") goes to the running job. Before each job the feeder
# looks whether one of the profile files, or ~/.bashrc, changed since this
# shell began to read them (a copy: since its reader did): then nothing
# runs, the starter answers "stale" instead of an exit status, and the
# shell exits, and the coordinator sends the job to a new shell.
# Login "share" is "slot" that also hands what it read on, once set up,
# with its "ready": when it began to read (microseconds since 1970), its
# directory, its variables and umask, its saved functions, aliases,
# traps and options, its PATH, and the options it set otherwise than a
# bash starts with. A shell of login "copy" is given that state (but the
# PATH) and reads no profile, sets nothing up, and has no watchdog: the machine's login profile is read once per
# prelude, not once per slot. It is not handed on when the profile changed
# a limit (ulimit), which no copy could take; open files and processes the
# profile started are the reader's own.
# Other login shells, and login "job", run "$SHELL -lc" per job. Login
# "none" reads no profile: each job is a fork of the starter, with the
# environment this shell was started with (a local machine's: the coordinator's,
# as xargs would run it). This shell's own names start with _g_, and a job
# sees none of them.
#
# A job's life is its own. Each job runs in a subshell of its own (its
# environment and workdir go with it) and a process group of its own. Its
# stdout and stderr are this shell's: pipes into two tee processes, started
# once per shell, that copy every byte to the coordinator (the shell's own
# stdout and stderr) and to the shell's stream files in the spool
# (~/.gpudispatch/jobs, 0700): TAG-N.out and TAG-N.err. A tee whose
# coordinator is gone goes on writing the file, so that a coordinator that
# comes back takes up the output from the byte it had (follow.sh). TAG.job
# says which job runs: its tag, the stream files, this shell's pid, the
# end mark, the offsets, the job's pid, the boot, the start, its GPUs
# (CUDA_VISIBLE_DEVICES, "-" for none), then the about line on a line of
# its own. Once the job and its group are gone, the shell writes NUL and the
# end mark on stderr, then NUL, the end mark, a space, the exit status, why
# gpudispatch ended it ("-", "cancelled" or "timeout") and when it ended
# (seconds since 1970) and a newline on stdout: the coordinator splits the
# streams there. The mark is new for each job and never in a job's
# environment, so a job cannot end its own output.
#
# Once set up, this shell only waits: a feeder (see _g_feed), forked once,
# reads stdin and makes each job's code, which the starter runs; neither
# hands anything back, so that a job costs one hop between processes on its
# way in and none on its way out. "c" stops the running job's group: TERM,
# then KILL after the grace; so does the job's timeout, timed by a process
# of its own. When stdin ends without "q" (the coordinator went away) a job
# (one with a tag) is not stopped: it runs on, the shell exits after it,
# and its files stay for the coordinator that comes back. A command without
# a tag (the coordinator's own look at the machine) is stopped then. A
# profile's TMOUT, which bash's read takes for its timeout, ends nothing.
# When a job exits, whatever it left in its group is reaped too, so a
# finished job never leaves a process holding the GPU.
# Once set up (the profile read, the prelude in place), the shell writes NUL,
# "ready" and a newline on stdout, once, before anything else there; a
# shell that could not be set up does not.
# The bootstrap's copy of this code (spawn.Bootstrap) is not the profile's.
unset -v w
_g_tag=$1
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
_g_record && [ "${#_g_f[@]}" -ge 9 ] || exit "$_g_x_unread"
_g_grace=${_g_f[0]} _g_limit=${_g_f[1]} _g_login=${_g_f[2]} _g_inter=${_g_f[3]} _g_wd=${_g_f[4]}
_g_conda=${_g_f[5]} _g_venv=${_g_f[6]} _g_mods=${_g_f[7]} _g_setup=${_g_f[8]}
_g_henv=("${_g_f[@]:9}")
# shellcheck disable=SC2088 # a literal ~ from the inventory means $HOME
case $_g_wd in
  "~") _g_wd=$HOME ;;
  "~/"*) _g_wd=$HOME/${_g_wd#"~/"} ;;
esac
# The spool: the stream files and records of the user's jobs, the user's
# alone.
# shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
_g_spool=$_g_d_spool
if [ ! -d "$_g_spool" ]; then
  builtin command mkdir -p -- "${_g_spool%/*}" && builtin command mkdir -m 0700 -- "$_g_spool"
fi
if [ ! -O "$_g_spool" ] || [ -L "$_g_spool" ]; then
  echo "gpudispatch: $_g_spool is not a directory of yours" >&2
  # shellcheck disable=SC2154 # named in spawn/prelude.sh, sent first
  exit "$_g_x_unsafe"
fi
_g_flag=$_g_spool/$_g_tag
# A job's lines are sourced from "bash", a file in a directory of this
# shell's, so that bash's messages about the job say "bash: line 2:" of the
# job's own lines, as bash -c would, not a line of this script. The file is
# written in place: ext4 flushes a file truncated and written again as it is
# closed. What is left of a longer job is overwritten with blanks (at most
# 4 KiB of them, else the file is truncated).
builtin command mkdir -m 0700 -- "$_g_flag.d" 2>/dev/null
if [ ! -O "$_g_flag.d" ] || [ -L "$_g_flag.d" ]; then
  echo "gpudispatch: cannot make the directory $_g_flag.d" >&2
  exit "$_g_x_unsafe"
fi
# The options a bash has as it starts, as the starter will (see _g_odiff;
# a copy is given its reader's).
[ "$_g_login" = copy ] || { builtin set +o; builtin shopt -p; } >"$_g_flag.d/opts" 2>/dev/null
# The set-up (the profile, then the workdir, modules, conda env, venv and
# setup) has $_g_limit seconds (0: no limit). A watchdog that reads a pipe
# only this shell writes to ends a shell still in it then with SIGUSR2,
# which the coordinator reads as "set-up too slow", and what the set-up
# started with KILL to the shell's group (the shell leads it: sshd's
# setsid, or the local spawn's). It ends quietly on the pipe's end (the
# shell closes it after the set-up, or is gone), or at the limit when
# $_g_flag.d/ready says the set-up is done (a child of the profile may hold
# the pipe), or when it is no longer this shell's child (an orphan's $$ may
# be another process's by now). A shell the kernel holds (a read on a dead
# NFS mount) outlives it. A copy sets nothing up (its reader did): it has
# no watchdog.
_g_dog=
case $_g_login:$_g_limit in
copy:* | *:0 | *:0.000 | *: | *:*[!0-9.]*) ;;
*)
  exec {_g_dog}> >(
    exec >/dev/null 2>&1
    IFS= read -r -t "$_g_limit" _
    [ $? -gt 128 ] || exit 0
    [ ! -e "$_g_flag.d/ready" ] || exit 0
    IFS=' ' read -r _ _ _ _g_up _ <"/proc/$BASHPID/stat" || _g_up=$(ps -o ppid= -p "$BASHPID")
    [ "${_g_up// /}" = "$$" ] || exit 0
    kill -USR2 $$
    kill -KILL -- -$$
  )
  ;;
esac
_g_srclen=0
printf -v _g_here 'builtin cd -- %q && builtin shopt -u sourcepath && builtin source bash' "$_g_flag.d"
# _g_prepare sets the shell up for its jobs, where it is called (at the top
# level, after the profile): it enters the workdir, activates the env, and
# tries the setup once in a subshell with the host's env. When one fails,
# _g_unfit says why, in one line. Its own output goes where its caller
# sends it; what it says, to $_g_flag.env.
_g_prepare() {
  _g_unfit=
  if [ -n "$_g_wd" ] && ! builtin cd -- "$_g_wd" 2>/dev/null; then
    if [ -d "$_g_wd" ]; then
      _g_unfit="workdir $_g_wd cannot be entered (permissions)"
    else
      _g_unfit="workdir $_g_wd does not exist"
    fi
    return 1
  fi
  if [ -n "$_g_conda$_g_venv$_g_mods" ] && ! _g_activate "$_g_conda" "$_g_venv" "$_g_mods" 2>"$_g_flag.env"; then
    _g_unfit=$(_g_said)
    return 1
  fi
  if [ -n "$_g_setup" ]; then
    # shellcheck disable=SC2163 # each entry is NAME=value
    (
      for _g_kv in "${_g_henv[@]}"; do builtin export "$_g_kv"; done
      builtin eval "$_g_setup"
    ) 2>"$_g_flag.env"
    _g_rc=$?
    if [ "$_g_rc" != 0 ]; then
      _g_unfit="setup failed with exit status $_g_rc: $(_g_said)"
      return 1
    fi
  fi
  return 0
}
# _g_said is the last line of $_g_flag.env that says something, with
# "gpudispatch: " or bash's "NAME: line N: " cut (the line of this script's
# eval, not the user's), or "(it said nothing)"; the file goes.
_g_said() {
  local line last=
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in *[![:space:]]*) last=$line ;; esac
  done <"$_g_flag.env"
  builtin command rm -f -- "$_g_flag.env"
  last=${last#gpudispatch: }
  if [[ $last =~ ^[^\ :]+:\ line\ [0-9]+:\ (.*)$ ]]; then last=${BASH_REMATCH[1]}; fi
  builtin echo "${last:-(it said nothing)}"
}
# _g_saved prints what a job's fork takes back of a login shell: its
# functions (and which are exported) but this script's, a line
# "#gpudispatch-aliases", its aliases and traps, then a line "#opts" and
# its options.
_g_saved() {
  local f o
  builtin declare -F >"$_g_flag.d/fns"
  while IFS=' ' builtin read -r _ o f; do
    case $f in _g_*) continue ;; esac
    builtin declare -f "$f"
    case $o in -f | "") ;; *) builtin echo "builtin declare $o $f" ;; esac
  done <"$_g_flag.d/fns"
  builtin echo "#gpudispatch-aliases"
  builtin alias -p
  builtin trap -p
  builtin echo "#opts"
  builtin set +o
  builtin shopt -p
}
# _g_specials are the variables a copy of a login shell's state leaves
# out: bash's own, and where the shell is. An array: a profile may set IFS.
_g_specials=(RANDOM SRANDOM SECONDS LINENO HISTCMD EPOCHSECONDS EPOCHREALTIME
  BASH_ARGV BASH_ARGC BASH_SOURCE BASH_LINENO FUNCNAME BASH_COMMAND BASH_ARGV0
  BASH_EXECUTION_STRING BASH_SUBSHELL BASHPID PIPESTATUS PWD OLDPWD SHLVL _ COLUMNS LINES)
_g_unfit=
_g_odiff=
_g_profiled=
_g_ref=
_g_asis=
_g_act=
_g_at=
_g_cap=
[ "$_g_login" != none ] || _g_asis=1
if [ "$_g_login" = copy ]; then
  # A copy of another job shell of this machine that read the profile and
  # prepared for the same prelude (login "share"), in a record: when it
  # began to read the profile (microseconds since 1970), the directory it
  # was in, its variables and umask, what _g_saved printed in three (its
  # functions, the rest, its options: as the reader splits it below,
  # which costs bash a millisecond or two), the options it set otherwise
  # than a bash starts with (_g_odiff: the same for every bash of this
  # machine), and its tag. It reads no profile: the machine does that
  # once.
  _g_record && [ "${#_g_f[@]}" = 8 ] || exit "$_g_x_unread"
  _g_at=${_g_f[0]} _g_cwd=${_g_f[1]} _g_vars=${_g_f[2]} _g_fstate=${_g_f[3]}
  _g_state=${_g_f[4]} _g_opts=${_g_f[5]} _g_odiff=${_g_f[6]} _g_from=${_g_f[7]}
  _g_f=()
  _g_profiled=1
  builtin eval "$_g_vars" 2>/dev/null
  _g_vars=
  builtin cd -- "$_g_cwd" 2>/dev/null || _g_unfit="the directory $_g_cwd, where the login profile left its first job shell, cannot be entered"
elif [ "$_g_login" != job ] && [ -z "$_g_asis" ] && [ "${SHELL:-/bin/bash}" != "${SHELL%bash}" ]; then
  # Login "slot", or "share": then, once set up, this shell hands its state
  # to the coordinator for copies, unless the profile changed a limit
  # (ulimit), which no copy could take.
  _g_profiled=1
  _g_at=${EPOCHREALTIME//[!0-9]/}
  [ "$_g_login" != share ] || _g_cap=$(builtin ulimit -a 2>&1)
  if [ -n "$_g_inter" ]; then
    # An interactive login bash of its own reads the profile and ~/.bashrc
    # (its "not interactive" guard passes), prepares, and hands back its
    # variables, then what _g_saved prints, on fd 9; all it prints else,
    # "no job control" included, is thrown away.
    # shellcheck disable=SC2016 # expanded by that bash
    {
      IFS= read -r -d '' _g_unfit
      IFS= read -r -d '' _g_vars
      IFS= read -r -d '' _g_state
    } < <("${SHELL:-/bin/bash}" -l -i -c "$(builtin declare -f _g_activate _g_prepare _g_said _g_saved)"'
_g_wd=$1 _g_conda=$2 _g_venv=$3 _g_mods=$4 _g_setup=$5 _g_flag=$6
IFS=" " builtin read -r -a _g_specials <<<"$7"
builtin shift 7
_g_henv=("$@")
builtin set --
builtin set +m +H
builtin set +o history
_g_prepare
builtin printf "%s\0" "$_g_unfit" >&9
builtin unset -f _g_activate _g_prepare _g_said
builtin unset -v "${_g_specials[@]}" "${!_g_@}"
{ builtin declare -p; builtin printf "\0"; _g_saved; builtin printf "\0"; } >&9' \
      bash "$_g_wd" "$_g_conda" "$_g_venv" "$_g_mods" "$_g_setup" "$_g_flag" "${_g_specials[*]}" "${_g_henv[@]}" 9>&1 </dev/null >/dev/null 2>&1)
    if [ -z "${_g_vars+1}" ] || [ -z "${_g_state+1}" ]; then
      _g_unfit="shell: interactive: an interactive login bash did not start here (a ~/.bashrc that exits?)"
    fi
    builtin eval "$_g_vars" 2>/dev/null
    _g_vars=
    [ -z "$_g_wd" ] || builtin cd -- "$_g_wd" 2>/dev/null || _g_unfit=${_g_unfit:-"workdir $_g_wd cannot be entered"}
  else
    # At the top level, not in a function: the profile's declarations must be
    # global, as in a login shell.
    # shellcheck disable=SC1090,SC1091 # the user's own profile
    {
      if [ -r /etc/profile ]; then . /etc/profile; fi
      if [ -r ~/.bash_profile ]; then
        . ~/.bash_profile
      elif [ -r ~/.bash_login ]; then
        . ~/.bash_login
      elif [ -r ~/.profile ]; then
        . ~/.profile
      fi
    } </dev/null >/dev/null 2>&1
    _g_prepare </dev/null >/dev/null 2>&1
  fi
  # Shared only with the limits the shell started with.
  [ -z "$_g_cap" ] || [ "$_g_cap" = "$(builtin ulimit -a 2>&1)" ] || _g_cap=
fi
if [ -n "$_g_profiled" ]; then
  \builtin shopt -u expand_aliases
  _g_ifs_set=${IFS+1} _g_ifs=${IFS-}
  # What a job's fork takes back: the functions (and which are exported),
  # aliases, options and traps the profile set, in _g_state. They go through
  # a file in the shell's own directory (which goes with it): its
  # descriptor, _g_ref, stays open for its time, when the profile was read.
  # The file is as old as when the reader began to read the profile: a
  # profile file changed since is newer. A copy, which has its state
  # already, takes its reader's file while it is there (as old): no
  # process of its own; else it makes an empty one.
  # The feeder compares the profile files with it (_g_since): by its name
  # when the file is this shell's (a stat through /dev/fd costs more), by
  # the descriptor when it is the reader's (which may go first).
  _g_tmp=$_g_flag.d/ref _g_since=$_g_flag.d/ref _g_home=~
  if [ "$_g_login" = copy ]; then
    if [ -O "$_g_spool/$_g_from.d/ref" ] && { exec {_g_ref}<"$_g_spool/$_g_from.d/ref"; } 2>/dev/null; then
      _g_since=/dev/fd/$_g_ref
    elif : 2>/dev/null >"$_g_tmp"; then
      builtin command touch -d "@${_g_at%??????}.${_g_at#"${_g_at%??????}"}" -- "$_g_tmp" 2>/dev/null
      exec {_g_ref}<"$_g_tmp"
    fi
  elif if [ -n "$_g_inter" ]; then
    builtin printf '%s' "$_g_state" 2>/dev/null >"$_g_tmp"
  else
    _g_saved 2>/dev/null >"$_g_tmp"
  fi; then
    [ -z "$_g_at" ] || builtin command touch -d "@${_g_at%??????}.${_g_at#"${_g_at%??????}"}" -- "$_g_tmp" 2>/dev/null
    exec {_g_ref}<"$_g_tmp"
    IFS= builtin read -r -d '' -u "$_g_ref" _g_state
  fi
  if [ -z "$_g_ref" ]; then
    _g_profiled=
  fi
  # What a copy takes (login "share"): the variables as the profile and the
  # prelude left them, but this script's and bash's own.
  if [ -n "$_g_cap" ] && [ -n "$_g_ref" ] && [ -z "$_g_unfit" ]; then
    _g_cap=$(
      builtin unset -v "${_g_specials[@]}" "${!_g_@}" 2>/dev/null
      builtin declare -p
      builtin umask -p
    )
    _g_cwd=$PWD _g_capstate=$_g_state _g_path=$PATH
  else
    _g_cap=
  fi
  # A clean shell for this script, whatever the profile named its functions
  # (a "cd" or a "read") or set. Their names go through a file: no fork. A
  # copy took variables only: it has no function or alias of the
  # profile's.
  if [ "$_g_login" != copy ]; then
    builtin declare -F >"$_g_flag.d/fns"
    while IFS=' ' builtin read -r _ _ _g_f; do
      case $_g_f in _g_*) ;; *) builtin unset -f "$_g_f" ;; esac
    done <"$_g_flag.d/fns"
    builtin unalias -a
  fi
  builtin trap - ERR DEBUG RETURN
  builtin trap '_g_forward' TERM
  builtin set +e +u +f +C +o pipefail +o errtrace +o functrace
  IFS=$' \t\n'
  # A job's fork takes back only the options the profile set otherwise
  # than the starter has them (a hundred lines fewer to evaluate per job;
  # see _g_scode). A bash of a job's own (one that names $$) takes back
  # all of them. The functions are defined once, in the starter; the
  # aliases and traps in each job. A copy was given them apart (splitSaved
  # in share.go does as this does).
  if [ "$_g_login" != copy ]; then
    _g_opts=
    case $_g_state in
      *$'\n#opts\n'*)
        _g_opts=${_g_state#*$'\n#opts\n'}
        _g_state=${_g_state%%$'\n#opts\n'*}$'\n'
        ;;
    esac
    _g_fstate=
    case $_g_state in
      *'#gpudispatch-aliases'$'\n'*)
        _g_fstate=${_g_state%%'#gpudispatch-aliases'$'\n'*}
        _g_state=${_g_state#*'#gpudispatch-aliases'$'\n'}
        ;;
    esac
  fi
  # _g_odiff is the options the profile set otherwise than a bash has
  # them as it starts, for the starter: a hundred lines fewer to evaluate
  # per job. The lists go through a file (no fork, no byte-by-byte read).
  # A copy was given its reader's.
  if [ "$_g_login" != copy ]; then
    declare -A _g_have=()
    while IFS= read -r _g_n; do _g_have[$_g_n]=1; done <"$_g_flag.d/opts"
    printf '%s\n' "$_g_opts" >"$_g_flag.d/opts"
    while IFS= read -r _g_n; do
      [ -z "$_g_n" ] || [ -n "${_g_have[$_g_n]+1}" ] || _g_odiff+=$_g_n$'\n'
    done <"$_g_flag.d/opts"
    unset -v _g_have
  fi
elif [ -n "$_g_asis" ]; then
  _g_prepare </dev/null >/dev/null 2>&1
else
  # A login shell per job: the env is activated in each, and tried once
  # here, as a job would do it.
  if [ -n "$_g_conda$_g_venv$_g_mods" ]; then
    printf -v _g_act '%s\n_g_activate %q %q %q || builtin exit %d\nbuiltin unset -f _g_activate\n' \
      "$(builtin declare -f _g_activate)" "$_g_conda" "$_g_venv" "$_g_mods" "$_g_x_unsafe"
  fi
  if [ -n "$_g_inter" ]; then
    _g_unfit="shell: interactive needs bash as the login shell (here: ${SHELL:-?})"
  elif [ -n "$_g_wd" ] && [ ! -d "$_g_wd" ]; then
    _g_unfit="workdir $_g_wd does not exist"
  elif [ -n "$_g_act$_g_setup" ]; then
    # shellcheck disable=SC2163 # each entry is NAME=value
    (
      for _g_kv in "${_g_henv[@]}"; do builtin export "$_g_kv"; done
      [ -z "$_g_wd" ] || builtin cd -- "$_g_wd" || exit "$_g_x_unsafe"
      exec "${SHELL:-/bin/bash}" -lc "$_g_act$_g_setup"
    ) </dev/null >/dev/null 2>"$_g_flag.env"
    _g_rc=$?
    if [ "$_g_rc" != 0 ]; then
      _g_unfit=$(_g_said)
      case $_g_unfit in
        "conda"* | "venv"* | "module"*) ;;
        *) _g_unfit="setup failed with exit status $_g_rc: $_g_unfit" ;;
      esac
    fi
  fi
fi
[ ! -e "$_g_flag.env" ] || builtin command rm -f -- "$_g_flag.env"
[ -z "$_g_asis" ] || builtin trap '_g_forward' TERM
# Set after the profile's traps were saved: a job's fork does not run it.
builtin trap 'builtin command rm -rf -- "$_g_flag.d"' EXIT
# A job's fork closes _g_ref: one is open whatever the login.
[ -n "$_g_ref" ] || exec {_g_ref}</dev/null
# read -N counts characters of the locale; in C, bytes. The shell counts
# in C: LC_CTYPE, or LC_ALL when that is set (it would override LC_CTYPE).
# Jobs get back the locale the shell started with (the profile's, where
# this shell read it): LC_CTYPE costs a job's fork some 15 µs to put back,
# LC_ALL with LANG set up to a tenth of a millisecond.
if [ -n "${LC_ALL+1}" ]; then _g_lc_var=LC_ALL; else _g_lc_var=LC_CTYPE; fi
_g_lc_set=${!_g_lc_var+1} _g_lc_all=${!_g_lc_var-}
printf -v "$_g_lc_var" C
# A zombie left for a slow init to reap is not alive: look at process states.
_g_alive() {
  # shellcheck disable=SC2016 # awk's code
  builtin exec ps -A -o pgid= -o stat= 2>/dev/null |
    builtin exec awk -v g="$_g_pid" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}
# _g_reap stops the group of $_g_pid: TERM, then KILL after the grace. The
# grace is timed by a sleep of its own: the looking costs time on a loaded
# machine. It and _g_alive are the starter's too (see _g_scode): their
# commands are builtins, or "builtin exec" in a process of their own
# ("builtin command" there would fork once more, and a kill of $! would
# miss the command, left to run on with the streams' pipes).
_g_reap() {
  builtin kill -TERM -- -"$_g_pid" || builtin return 0
  builtin exec sleep "$_g_grace" &
  _g_timer=$!
  while _g_alive; do
    if ! builtin kill -0 "$_g_timer" 2>/dev/null; then
      builtin kill -KILL -- -"$_g_pid" 2>/dev/null
      builtin return 0
    fi
    builtin command sleep 0.05
  done
  builtin kill "$_g_timer" 2>/dev/null
}
# _g_stop reaps the running jobs: the group leaders among the shell's
# children and theirs (the starter's); _g_found says whether there was
# one. It fails once the shell is gone; a
# zombie is gone (a slow init may reap it late).
_g_stop() {
  _g_found=
  # shellcheck disable=SC2046 # the pids are meant to be split into words
  set -- $(ps -A -o pid= -o ppid= -o pgid= -o stat= 2>/dev/null | awk -v s="$$" '
    $4 ~ /^Z/ { next }
    { up_of[$1] = $2; group[$1] = $3 }
    $1 == s { up = 1 }
    END {
      if (!up) { print "gone"; exit }
      for (p in up_of) if (p == group[p] && (up_of[p] == s || up_of[up_of[p]] == s)) print p
    }')
  for _g_pid; do
    [ "$_g_pid" != gone ] || return 1
    _g_found=1
    _g_reap
  done
}
# _g_feed is the feeder: a process of its own (a process substitution,
# forked once) that reads stdin and makes each job's code for the starter
# (see _g_scode), on its stdout, first the starter's set-up (_g_init). "c"
# stops the running job's group: TERM, then KILL after the grace. When
# stdin ends without "q" (the coordinator went away) a job (one with a tag)
# is not stopped: it runs on, the starter exits after it, and its files
# stay for the coordinator that comes back; a command without a tag (the
# coordinator's own look) is stopped then. No function is called between
# jobs: once it has had a child, bash blocks and unblocks signals at each
# call.
_g_feed() {
  local rec hl hdr body idle msg tagged=
  printf '%08d%s' "${#_g_init}" "$_g_init"
  _g_init=
  while :; do
    # More than 128: a profile's TMOUT (which read takes for its timeout):
    # no end.
    IFS= read -r -N 1 rec || { (($? > 128)) && continue; break; }
    case $rec in
      j)
        if ! IFS= read -r -N 8 hl || ! IFS= read -r -N "$((10#$hl))" hdr; then break; fi
        # shellcheck disable=SC2086 # the lengths are meant to be split into words
        set -- $hdr
        IFS= read -r -N "$((${hdr// /+}))" body || break
        # Each job costs every simple command here some microseconds
        # (bash prints each for $BASH_COMMAND): the fields are cut in one.
        _g_mark=${body:0:$1} _g_at=$1 _g_jtag=${body:_g_at:$2} _g_at=$((_g_at + $2)) \
          _g_about=${body:_g_at:$3} _g_at=$((_g_at + $3)) _g_limit=${body:_g_at:$4} _g_at=$((_g_at + $4)) \
          _g_rotate=${body:_g_at:$5} _g_at=$((_g_at + $5)) _g_ob=${body:_g_at:$6} _g_at=$((_g_at + $6)) \
          _g_eb=${body:_g_at:$7} _g_at=$((_g_at + $7)) _g_script=${body:_g_at:$8} _g_at=$((_g_at + $8)) \
          _g_exports=${body:_g_at:$9} _g_at=$((_g_at + $9)) _g_gpus=${body:_g_at:${10}} \
          body='' tagged=${_g_jtag:+1} _g_new=''
        # Whether a profile file changed since this shell read it, in one
        # test (see _g_since). Then the starter answers "stale" and ends the
        # shell; so it does, with why, when the shell could not be set up.
        if [[ -n $_g_profiled && (/etc/profile -nt $_g_since || $_g_home/.bash_profile -nt $_g_since ||
          $_g_home/.bash_login -nt $_g_since || $_g_home/.profile -nt $_g_since || $_g_home/.bashrc -nt $_g_since) ]]; then
          printf -v msg 'e %d 0 0 0 0:%s%s' "${#_g_mark}" "$_g_mark" stale
          printf '%08d%s' "${#msg}" "$msg"
          continue
        fi
        if [ -n "$_g_unfit" ]; then
          printf -v msg 'e %d 0 0 0 0:%s%s' "${#_g_mark}" "$_g_mark" "unfit ${_g_unfit//$'\n'/ }"
          printf '%08d%s' "${#msg}" "$msg"
          continue
        fi
        if [ -n "$_g_rotate" ]; then
          # Everything of the earlier jobs is home: new files.
          _g_gen=$((_g_gen + 1))
          _g_files=$_g_tag-$_g_gen _g_new=$_g_spool/$_g_tag-$_g_gen
        fi
        if [ -n "$_g_profiled$_g_asis" ]; then
          # The job's lines, after a first line's worth that goes back to
          # the directory the job is in and takes back the profile's
          # sourcepath.
          _g_n=$_g_spre$_g_script$'\n' _g_pad=$((_g_srclen - ${#_g_n}))
          if ((_g_pad > 4096)); then
            : >"$_g_flag.d/bash"
            _g_pad=0
          elif ((_g_pad < 0)); then
            _g_pad=0
          fi
          printf '%s%*s' "$_g_n" "$_g_pad" '' 1<>"$_g_flag.d/bash" || exit "$_g_x_unread"
          _g_srclen=$((${#_g_n} + _g_pad))
        fi
        # The job's code, for the starter's fork: no job control in the
        # job, as in bash -c (what it starts in the background stays in its
        # group), its locale, environment and workdir, then, where the
        # login shell is read once, the job as bash -lc would run it: what
        # the profile set (its aliases, traps and options: its functions
        # are the starter's), $0 bash, no positional parameters, none of
        # this script's names, its own BASHPID-seeded RANDOM and SECONDS
        # from 0. A job that names $$ gets a bash of its own, so that $$ is
        # its own (to kill itself, or to name its files): it takes up the
        # profile's variables from the fork, the rest from what was saved,
        # then the job's environment again.
        _g_code=$_g_chead$_g_exports$_g_cwdl
        if [ -z "$_g_profiled$_g_asis" ]; then
          # shellcheck disable=SC2016 # expanded by the job
          printf -v _g_kv 'builtin exec "${SHELL:-/bin/bash}" -lc %q\n' "$_g_pre$_g_script"
          _g_code+=$_g_kv
        else
          # shellcheck disable=SC2016 # the job line's own text
          case $_g_script in
            *'$$'* | *'${$}'*)
              printf -v _g_kv '_g_vars=$(builtin unset -v %s "${!_g_@}" 2>/dev/null; builtin declare -p)\nbuiltin exec "${SHELL:-/bin/bash}" --noprofile --norc -c %q bash "$_g_vars" %q %q %q\n' \
                "${_g_specials[*]}" "$_g_dollar" "$_g_fstate$_g_state$_g_opts" "$_g_pre$_g_here" "$_g_exports"
              _g_code+=$_g_cifs$_g_kv
              ;;
            *) _g_code+=$_g_cifs$_g_ctail ;;
          esac
        fi
        # For the starter: the mark, the job's record but its pid, boot
        # and start (none for a job without a tag), then its GPUs and the
        # about line, its time limit, its new stream files, and its code.
        _g_rec=${_g_jtag:+"$_g_jtag $_g_files $$ $_g_mark $_g_ob $_g_eb"} _g_kv=$_g_gpus$'\n'$_g_about
        printf -v msg 'j %d %d %d %d %d:%s%s%s%s%s%s' "${#_g_mark}" "${#_g_rec}" "${#_g_kv}" "${#_g_limit}" "${#_g_new}" \
          "$_g_mark" "$_g_rec" "$_g_kv" "$_g_limit" "$_g_new" "$_g_code"
        _g_code=
        printf '%08d%s' "${#msg}" "$msg"
        ;;
      c)
        # The running job, or one about to start from fields already
        # handed on: the flag stays until the starter has said the job's
        # end (or nothing ran for a second: the job had ended).
        echo cancelled >"$_g_flag.why"
        idle=0
        while [ -e "$_g_flag.why" ] && [ "$idle" -lt 20 ]; do
          _g_stop || break
          if [ -n "$_g_found" ]; then idle=0; else idle=$((idle + 1)); fi
          sleep 0.05
        done
        ;;
      q)
        # The coordinator ends the shell. Only a command of its own (a
        # look, untagged) may run then (the coordinator ends a shell that
        # runs a job only once the job has ended): one look stops it.
        printf '%08d%s' 12 'q 0 0 0 0 0:'
        exec >/dev/null
        [ -n "$tagged" ] || [ -z "$hl" ] || _g_stop
        exit 0
        ;;
    esac
  done
  # stdin ended with no "q": the coordinator went away. A job runs on; a
  # look of the coordinator's own (untagged) has no one to answer to, and
  # is stopped until the shell, which sees the end once this feeder has
  # closed its side, is gone.
  exec >/dev/null
  if [ -z "$tagged" ]; then
    while _g_stop; do
      sleep 0.05
    done
  fi
}
# _g_forward hands a TERM this shell got to the starter, which hands it to
# the running job's group: a job that kills $PPID ends itself, as under bash
# -lc, not its slot's shell.
# shellcheck disable=SC2317 # called by the trap
_g_forward() {
  [ -z "${_g_lpid-}" ] || kill -TERM "$_g_lpid" 2>/dev/null
}
# _g_tees starts the tees of the stream files $_g_stream.out and .err:
# process substitutions, so that their pipes cost no mkfifo and no subshell
# (this shell forks nothing per job: its starter does, which starts new
# ones in its place). A tee ignores SIGPIPE: with its coordinator gone it
# goes on writing its file. Each holds no descriptor of this shell's but
# its own pipe and where it writes, so that it sees its end once the shell
# and the starter are gone. Its commands are the starter's too (see
# _g_scode).
_g_tees() {
  exec 1> >(
    builtin trap '' PIPE
    builtin exec tee -a -- "$_g_stream.out" >&5 3<&- 4>&- 6>&- {_g_ref}<&-
  )
  exec 4> >(
    builtin trap '' PIPE
    builtin exec tee -a -- "$_g_stream.err" >&6 3<&- 5>&- {_g_ref}<&-
  )
}
# _g_scode is the starter's code: a bash of its own that forks the jobs, so
# that in a job's fork $$ is the starter's, which sends a TERM it gets on to
# the job. Its stdin is the feeder's stdout: first its set-up (_g_init): the
# variables of this shell but this script's, the profile's functions, and
# what else the profile set, with the options it set otherwise than the
# starter has them (_g_sstate, see _g_odiff), then its own few names (the
# files it writes, _g_tees, _g_reap, _g_alive), so that a job's fork has
# little to put away and nothing to define (freeing and defining cost a
# copy of each page they touch there). Then a message per job: eight
# digits of length, then "j", the lengths of the fields, ":", the fields:
# the end mark, the job's record but its pid, boot and start (empty for a
# job without a tag), its GPUs and about line, its time limit, its new
# stream files (empty but for a rotation), its code. It forks the job in a
# process group of its own (stdout $_g_stream.out's tee, stderr fd 4,
# the other's), writes its record, keeps its time limit, reaps its group
# once it exits, and says its end on both streams. "e" ends the shell
# with an answer instead of a job's end (the mark, then the answer), "q"
# ends it with nothing kept; when its stdin ends (the coordinator went
# away), the files of a job that ran stay. Its own commands are builtins,
# or go through "builtin command": the profile's functions are defined in
# it. No function is called between jobs (see _g_feed).
# shellcheck disable=SC2016 # expanded by the starter
_g_scode='exec 2>/dev/null
LC_ALL=C IFS= builtin read -r -N 8 _g_n && LC_ALL=C IFS= builtin read -r -N "$((10#$_g_n))" _g_m || builtin exit '"$_g_x_unread"'
builtin eval "$_g_m"
builtin unset -v _g_n _g_m
builtin set --
builtin trap "builtin [ -z \"\${_g_pid-}\" ] || builtin kill -TERM -- -\"\$_g_pid\" 2>/dev/null" TERM
while :; do
  IFS= builtin read -r -N 8 _g_n || { (($? > 128)) && continue; break; }
  IFS= builtin read -r -N "$((10#$_g_n))" _g_m || builtin exit '"$_g_x_unread"'
  _g_at=${_g_m%%:*}
  builtin set -- $_g_at
  _g_at=$((${#_g_at} + 1)) _g_mark=${_g_m:_g_at:$2} _g_at=$((_g_at + $2)) _g_rec=${_g_m:_g_at:$3} \
    _g_at=$((_g_at + $3)) _g_tail=${_g_m:_g_at:$4} _g_at=$((_g_at + $4)) _g_limit=${_g_m:_g_at:$5} \
    _g_at=$((_g_at + $5)) _g_limiter= _g_why=-
  case $1 in
    q) builtin exec rm -rf -- "$_g_stream.out" "$_g_stream.err" "$_g_flag.job" "$_g_flag.why" "$_g_flag.d" ;;
    e)
      builtin printf "\\0%s" "$_g_mark" >&4
      builtin printf "\\0%s %s\\n" "$_g_mark" "${_g_m:_g_at}"
      builtin exec rm -rf -- "$_g_stream.out" "$_g_stream.err" "$_g_flag.job" "$_g_flag.d"
      ;;
  esac
  if ((${6:-0})); then
    # New stream files: everything of the earlier jobs is home.
    _g_n=${_g_m:_g_at:$6} _g_at=$((_g_at + $6))
    builtin set -- "$_g_stream.out" "$_g_stream.err"
    _g_stream=$_g_n
    _g_tees
    builtin command rm -f -- "$@"
  fi
  _g_m=${_g_m:_g_at}
  if builtin [ -e "$_g_flag.why" ]; then
    # Cancelled before it started: it does not run.
    builtin command rm -f -- "$_g_flag.why"
    builtin printf -v _g_now "%(%s)T" -1
    builtin printf "\\0%s" "$_g_mark" >&4
    builtin printf "\\0%s 143 cancelled %s\\n" "$_g_mark" "$_g_now"
    continue
  fi
  builtin set -m
  (builtin eval "$_g_m") </dev/null 2>&4 4>&- 5>&- 6>&- &
  builtin set +m
  _g_pid=$! _g_m=
  builtin printf -v _g_now "%(%s)T" -1
  # Written in place: ext4 flushes a file that was truncated and written
  # again as it is closed, a third of a millisecond. What follows the
  # two lines of the record is left from a longer one.
  if builtin [ -n "$_g_rec" ]; then
    builtin printf "%s %s %s %s %s\\n" "$_g_rec" "$_g_pid" "$_g_boot" "$_g_now" "$_g_tail" 1<>"$_g_flag.job"
  else
    builtin : >"$_g_flag.job"
  fi
  if builtin [ "$_g_limit" != 0 ]; then
    # The time limit of the job, kept on the machine: no coordinator
    # needs to be there. It waits in a read of a pipe no one writes, not
    # in a sleep of its own: the kill that ends it early (the job ended)
    # leaves nothing behind, however soon it comes.
    (
      IFS= builtin read -r -t "$_g_limit" _g_s <> <(:)
      builtin echo timeout >"$_g_flag.why"
      _g_reap
    ) </dev/null >/dev/null 4>&- 5>&- 6>&- &
    _g_limiter=$!
  fi
  # The end of the job, and the reaping. A TERM the starter gets
  # meanwhile ends the wait: it goes to the job, whose end is still
  # waited for.
  builtin wait "$_g_pid"
  _g_rc=$?
  while ((_g_rc > 128)) && builtin kill -0 "$_g_pid" 2>/dev/null; do
    builtin wait "$_g_pid"
    _g_rc=$?
  done
  [[ -z $_g_limiter ]] || builtin kill "$_g_limiter"
  ! builtin kill -0 -- -"$_g_pid" 2>/dev/null || _g_reap
  _g_pid=
  if builtin [ -e "$_g_flag.why" ]; then
    # gpudispatch ended it: the feeder (cancel) or the time limit.
    IFS= builtin read -r _g_why <"$_g_flag.why"
    builtin command rm -f -- "$_g_flag.why"
  fi
  builtin printf -v _g_now "%(%s)T" -1
  builtin printf "\\0%s" "$_g_mark" >&4
  builtin printf "\\0%s %d %s %s\\n" "$_g_mark" "$_g_rc" "$_g_why" "$_g_now"
done
builtin [ -s "$_g_flag.job" ] || builtin exec rm -rf -- "$_g_stream.out" "$_g_stream.err" "$_g_flag.job" "$_g_flag.d"
builtin exec rm -rf -- "$_g_flag.d"'
# _g_dollar is the code of a job's own bash, for a job that names $$: $1
# the variables, $2 what else the profile set, $3 the job's code, $4 its
# environment (exports).
# shellcheck disable=SC2016 # expanded by that bash
_g_dollar='builtin eval "$1" 2>/dev/null
builtin eval "$2" 2>/dev/null
builtin eval "$4"
_g_s=$3
builtin set --
builtin eval "builtin unset -v _g_s; $_g_s"'
_g_boot=-
IFS= read -r _g_boot </proc/sys/kernel/random/boot_id 2>/dev/null
# fd 5 and 6 are the coordinator's stdout and stderr; fd 1 and 4 the pipes
# to their tees, the jobs' stdout and stderr. The shell's own stderr is
# silenced so that bash's "Killed" job notices never land in a job's log.
if [ -n "$_g_dog" ]; then
  : >"$_g_flag.d/ready"
  exec {_g_dog}>&-
fi
# Set up: the shell says so once, first on its stdout, before any job's
# output (the coordinator tells the run the job began). A shell that could
# not be set up says nothing here and answers its first job with why.
# A shell of login "share" hands its state on with it (see "copy"), a
# record after "ready ".
if [ -n "$_g_unfit" ]; then
  :
elif [ -n "$_g_cap" ]; then
  printf '\0ready '
  _g_send "$_g_at" "$_g_cwd" "$_g_cap" "$_g_capstate" "$_g_path" "$_g_odiff"
else
  printf '\0ready\n'
fi
exec 5>&1 6>&2 2>/dev/null
_g_gen=0
_g_files=$_g_tag-$_g_gen
_g_stream=$_g_spool/$_g_files
_g_tees
# What every job's code and source file start and end with, made once
# (see the feeder): the setup, the locale, the workdir, IFS, then, where the
# login shell is read once, what a fork takes back.
_g_pre=$_g_act
if [ -n "$_g_setup" ]; then
  _g_pre+="{ $_g_setup
} || exit \$?
"
fi
_g_chead=$'builtin set +m\n'
if [ -n "$_g_lc_set" ]; then printf -v _g_kv '%s=%q\n' "$_g_lc_var" "$_g_lc_all"; else _g_kv="builtin unset -v $_g_lc_var"$'\n'; fi
_g_chead+=$_g_kv
_g_cwdl=
if [ -n "$_g_wd" ]; then
  printf -v _g_cwdl 'builtin cd -- %q || { builtin echo %q >&2; builtin exit %d; }\n' "$_g_wd" "gpudispatch: cannot enter workdir $_g_wd" "$_g_x_unsafe"
fi
if [ -n "$_g_ifs_set" ]; then printf -v _g_cifs 'IFS=%q\n' "$_g_ifs"; else _g_cifs=$'builtin unset -v IFS\n'; fi
# shellcheck disable=SC2016 # expanded by the job
printf -v _g_ctail 'RANDOM=$BASHPID${EPOCHREALTIME//[!0-9]/} SECONDS=0 BASH_ARGV0=bash\nbuiltin set -- "$_g_sstate"\nbuiltin unset -v ${!_g_*}\nbuiltin unset -f _g_tees _g_reap _g_alive\nbuiltin eval "$1" 2>/dev/null\nbuiltin set --\n%s' \
  "$_g_pre$_g_here"
# shellcheck disable=SC2016 # expanded by the job
_g_spre='builtin cd -- "$OLDPWD" || builtin exit '"$_g_x_unsafe"'; builtin unset -v OLDPWD; '
case $_g_opts in *'shopt -u sourcepath'*) ;; *) _g_spre+='builtin shopt -s sourcepath; ' ;; esac
# The starter's set-up (see _g_scode), which the feeder sends it first.
_g_sstate=$_g_state$_g_odiff
printf -v _g_init '%s\nbuiltin eval %q 2>/dev/null\n%s\n%s\n' \
  "$(
    builtin unset -v "${_g_specials[@]}" "${!_g_@}" BASHOPTS SHELLOPTS BASH_VERSINFO EUID PPID UID 2>/dev/null
    builtin declare -p
  )" "$_g_fstate" "$(builtin declare -p _g_flag _g_stream _g_boot _g_grace _g_ref _g_sstate)" \
  "$(builtin declare -f _g_tees _g_reap _g_alive)"
# fd 3 is the feeder; the starter, a bash of its own with no BASH_ENV to
# read (Lmod's profile sets one: the set-up gives it back), reads it.
exec 3< <(_g_feed 4>&- 5>&- 6>&-)
exec </dev/null
_g_init=
BASH_ENV='' "${BASH:-bash}" --noprofile --norc -c "$_g_scode" gpudispatch-starter "$_g_tag" <&3 3<&- {_g_ref}<&- &
_g_lpid=$!
# The starter has the jobs' streams and the feeder; this shell waits for
# it, and hands it a TERM it gets (_g_forward).
exec 1>/dev/null 3<&- 4>&-
while :; do
  wait "$_g_lpid"
  _g_rc=$?
  if [ "$_g_rc" -le 128 ] || ! kill -0 "$_g_lpid" 2>/dev/null; then break; fi
done
# The starter removed the shell's directory as it ended, or left it to
# this shell's EXIT trap.
[ -e "$_g_flag.d" ] || builtin trap - EXIT
exit "$_g_rc"
