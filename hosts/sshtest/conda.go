package sshtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Conda lays out a conda install under home/miniconda3 as real conda does
// (conda itself is not packaged here): bin/conda answering "shell.bash
// hook", "shell.posix activate", "info --base" and "env list",
// etc/profile.d/conda.sh, and envs/NAME/bin/python for each of envs, a
// script that prints "python of NAME". It returns the install's base.
func Conda(t testing.TB, home string, envs ...string) string {
	t.Helper()
	base := filepath.Join(home, "miniconda3")
	for _, e := range append([]string{""}, envs...) {
		prefix := base
		name := "base"
		if e != "" {
			prefix, name = filepath.Join(base, "envs", e), e
		}
		must(t, os.MkdirAll(filepath.Join(prefix, "bin"), 0o755))
		must(t, os.WriteFile(filepath.Join(prefix, "bin", "python"), []byte("#!/bin/sh\necho \"python of "+name+"\"\n"), 0o755))
	}
	must(t, os.MkdirAll(filepath.Join(base, "condabin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(base, "etc", "profile.d"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "bin", "conda"), []byte(strings.ReplaceAll(fakeConda, "@BASE@", base)), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "etc", "profile.d", "conda.sh"), []byte(strings.ReplaceAll(condaHook, "@BASE@", base)), 0o644))
	return base
}

// UbuntuBashrc writes Ubuntu's layout of a home where `conda init` ran:
// ~/.bashrc returns at once when the shell is not interactive, and conda's
// block is below that guard; the login profile reads ~/.bashrc (as
// Debian's ~/.profile does). rest goes after conda's block.
func UbuntuBashrc(t testing.TB, home, base, rest string) {
	t.Helper()
	bashrc := `# ~/.bashrc: executed by bash(1) for non-login shells.
# If not running interactively, don't do anything
case $- in
    *i*) ;;
      *) return;;
esac
HISTCONTROL=ignoreboth
# >>> conda initialize >>>
__conda_setup="$('` + base + `/bin/conda' 'shell.bash' 'hook' 2> /dev/null)"
if [ $? -eq 0 ]; then
    eval "$__conda_setup"
else
    if [ -f "` + base + `/etc/profile.d/conda.sh" ]; then
        . "` + base + `/etc/profile.d/conda.sh"
    else
        export PATH="` + base + `/bin:$PATH"
    fi
fi
unset __conda_setup
# <<< conda initialize <<<
` + rest
	must(t, os.WriteFile(filepath.Join(home, ".bashrc"), []byte(bashrc), 0o644))
	profile := filepath.Join(home, ".bash_profile")
	old, _ := os.ReadFile(profile)
	must(t, os.WriteFile(profile, append(old, []byte(`if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
`)...), 0o644))
}

// fakeConda answers as conda's own command does, for the base @BASE@.
// Real conda is a Python program: $FAKE_CONDA_COST, when set, is run first
// to cost what its start does (a python3 -c ”).
const fakeConda = `#!/bin/bash
base=@BASE@
if [ -n "${FAKE_CONDA_COST:-}" ]; then eval "$FAKE_CONDA_COST"; fi
case "$1 $2" in
  "shell.bash hook" | "shell.zsh hook" | "shell.posix hook")
    cat "$base/etc/profile.d/conda.sh"
    echo 'conda activate base'
    ;;
  "shell.posix activate" | "shell.bash activate")
    env=${3:-base}
    case $env in
      base) prefix=$base ;;
      /*) prefix=$env ;;
      *) prefix=$base/envs/$env ;;
    esac
    if [ ! -d "$prefix" ]; then
      echo "EnvironmentNameNotFound: Could not find conda environment: $env" >&2
      echo "You can list all discoverable environments with ` + "`conda info --envs`" + `." >&2
      exit 1
    fi
    path=$PATH
    [ -z "${CONDA_PREFIX:-}" ] || path=${path//"$CONDA_PREFIX/bin:"/}
    echo "export PATH='$prefix/bin:$path'"
    echo "export CONDA_PREFIX='$prefix'"
    echo "export CONDA_DEFAULT_ENV='$env'"
    echo "export CONDA_SHLVL='1'"
    echo "export CONDA_PROMPT_MODIFIER='($env) '"
    ;;
  "shell.posix deactivate" | "shell.bash deactivate")
    echo "unset CONDA_PREFIX CONDA_DEFAULT_ENV"
    ;;
  "info --base")
    echo "$base"
    ;;
  "env list" | "info --envs")
    echo "# conda environments:"
    echo "#"
    printf '%-20s *  %s\n' base "$base"
    for d in "$base"/envs/*/; do
      [ -d "$d" ] || continue
      d=${d%/}
      printf '%-23s %s\n' "${d##*/}" "$d"
    done
    ;;
  *)
    echo "fake conda: unsupported: $*" >&2
    exit 2
    ;;
esac
`

// condaHook is etc/profile.d/conda.sh: what "shell.bash hook" prints, as
// conda's (the conda function, activation through shell.posix).
const condaHook = `export CONDA_EXE='@BASE@/bin/conda'
export CONDA_PYTHON_EXE='@BASE@/bin/python'
__conda_exe() (
    "$CONDA_EXE" "$@"
)
__conda_activate() {
    \local ask_conda
    ask_conda="$(PS1="${PS1:-}" __conda_exe shell.posix "$@")" || \return
    \eval "$ask_conda"
    \hash -r
}
conda() {
    \local cmd="${1-__missing__}"
    case "$cmd" in
        activate|deactivate)
            __conda_activate "$@"
            ;;
        *)
            __conda_exe "$@"
            ;;
    esac
}
if [ -z "${CONDA_SHLVL+x}" ]; then
    \export CONDA_SHLVL=0
    PATH="$(\dirname "$(\dirname "$CONDA_EXE")")/condabin${PATH:+":${PATH}"}"
    \export PATH
fi
`
