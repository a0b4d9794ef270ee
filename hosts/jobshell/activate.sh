# gpudispatch: the activation of a job's env, sourced by the job shell
# (shell.sh) and put before a batch job's line (Activation). POSIX shell:
# other login shells than bash (zsh) run it too.
# _g_activate CONDA VENV MODULES loads the modules (one per line), then
# activates the conda env, then the venv, in the shell that calls it. When
# one cannot be, it says why on stderr, in a line that starts with
# "gpudispatch: ", and fails. It is also run by other login shells than
# bash (zsh), per job: it keeps to what they share.
_g_activate() {
  if [ -n "$3" ]; then
    if ! builtin command -v module >/dev/null 2>&1; then
      for _g_f in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
        # shellcheck disable=SC1090 # the host's own set-up of modules
        if [ -r "$_g_f" ]; then . "$_g_f"; break; fi
      done
    fi
    if ! builtin command -v module >/dev/null 2>&1; then
      builtin echo "gpudispatch: modules: the host has no module command (neither Lmod nor Environment Modules is set up in its login shell)" >&2
      return 1
    fi
    _g_left=$3
    while [ -n "$_g_left" ]; do
      _g_m=${_g_left%%"
"*}
      case $_g_left in *"
"*) _g_left=${_g_left#*"
"} ;; *) _g_left= ;; esac
      if ! module load "$_g_m" >/dev/null 2>&1; then
        _g_has=$(module -t avail 2>&1 | awk '/:$/ || /\/$/ || NF == 0 { next } { n++; if (n <= 30) printf "%s%s", (n > 1 ? ", " : ""), $1 } END { if (n > 30) printf ", and %d more", n - 30 }')
        builtin echo "gpudispatch: module $_g_m cannot be loaded; this host has: ${_g_has:-none}" >&2
        return 1
      fi
    done
  fi
  if [ -n "$1" ]; then
    if [ "$(builtin command -v conda 2>/dev/null)" != conda ]; then
      # No conda function in this shell (conda init put it below
      # ~/.bashrc's guard, or nowhere): conda where a terminal finds it.
      _g_exe=
      if [ -n "${CONDA_EXE-}" ] && [ -x "$CONDA_EXE" ]; then
        _g_exe=$CONDA_EXE
      else
        _g_exe=$(builtin command -v conda 2>/dev/null) || _g_exe=
      fi
      if [ -z "$_g_exe" ]; then
        for _g_f in "$HOME/miniforge3" "$HOME/mambaforge" "$HOME/miniconda3" "$HOME/anaconda3" /opt/conda; do
          if [ -x "$_g_f/bin/conda" ]; then
            _g_exe=$_g_f/bin/conda
            break
          fi
        done
      fi
      if [ -z "$_g_exe" ]; then
        builtin echo "gpudispatch: conda: not found on this host (not in its login shell, \$CONDA_EXE or PATH, nor in ~/miniforge3, ~/mambaforge, ~/miniconda3, ~/anaconda3, /opt/conda)" >&2
        return 1
      fi
      _g_f=bash
      [ -z "${ZSH_VERSION-}" ] || _g_f=zsh
      if ! _g_hook=$("$_g_exe" "shell.$_g_f" hook 2>/dev/null) || ! builtin eval "$_g_hook"; then
        builtin echo "gpudispatch: conda: $_g_exe shell.$_g_f hook failed" >&2
        return 1
      fi
    fi
    if ! conda activate "$1" >/dev/null 2>&1; then
      _g_has=$(conda env list 2>/dev/null | awk '/^#/ || NF == 0 { next } { printf "%s%s", (n++ ? ", " : ""), $1 }')
      builtin echo "gpudispatch: conda env $1 not found (or cannot be activated); this host has: ${_g_has:-no env}" >&2
      return 1
    fi
  fi
  if [ -n "$2" ]; then
    _g_v=$2
    # shellcheck disable=SC2088 # a literal ~ from the inventory means $HOME
    case $_g_v in
      "~") _g_v=$HOME ;;
      "~/"*) _g_v=$HOME/${_g_v#"~/"} ;;
    esac
    case $_g_v in /*) ;; *) _g_v=$PWD/$_g_v ;; esac
    if [ ! -r "$_g_v/bin/activate" ]; then
      builtin echo "gpudispatch: venv $2: no $_g_v/bin/activate on this host (from $PWD)" >&2
      return 1
    fi
    # shellcheck disable=SC1091 # the user's venv
    . "$_g_v/bin/activate" || {
      builtin echo "gpudispatch: venv $2: its bin/activate failed" >&2
      return 1
    }
  fi
  return 0
}
