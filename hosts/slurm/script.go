package slurm

import (
	"fmt"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
)

// batchScript is the batch script of the job c, tagged tag: it exports the
// job's environment, goes to its workdir, runs the job line under the
// user's login shell (after its env is activated and the setup, which must
// succeed), and writes the exit status to TAG.exit beside the output,
// atomically, before it exits.
// Slurm sets CUDA_VISIBLE_DEVICES.
func batchScript(c executor.Command, tag string) string {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n# gpudispatch job " + tag + "\n")
	b.WriteString(`_g_exit="$SLURM_SUBMIT_DIR/` + tag + `.exit"` + "\n")
	b.WriteString(`_g_end() { echo "$1" >"$_g_exit.tmp" && mv -f "$_g_exit.tmp" "$_g_exit"; exit "$1"; }` + "\n")
	for _, kv := range c.Env {
		b.WriteString("export " + shellescape.Quote(kv) + "\n")
	}
	switch wd := c.Workdir; {
	case wd == "":
	case wd == "~" || strings.HasPrefix(wd, "~/"):
		b.WriteString(`cd "$HOME"` + shellescape.Quote(strings.TrimPrefix(wd, "~")) + " || _g_end 1\n")
	default:
		b.WriteString("cd " + shellescape.Quote(wd) + " || _g_end 1\n")
	}
	pre := jobshell.Activation(c.Prelude)
	if c.Setup != "" {
		pre += "{ " + c.Setup + "\n} || exit\n"
	}
	// The job line is evaluated from the login shell's first line, with no
	// positional parameters: bash's messages about it give its own line
	// numbers, as under bash -c, not those of the activation before it.
	b.WriteString(`"${SHELL:-/bin/bash}" -lc 'eval "$1" || exit; _g_s=$2; set --; eval "unset -v _g_s; $_g_s"' bash ` +
		shellescape.Quote(pre) + " " + shellescape.Quote(c.Script) + "\n")
	b.WriteString("_g_end $?\n")
	return b.String()
}

// timeLimit is sbatch's --time for c: its own timeout in whole minutes
// (rounded up), else the cluster's time, else "-" for none.
func timeLimit(c executor.Command, dflt string) string {
	if c.Timeout > 0 {
		return fmt.Sprint(int((c.Timeout + time.Minute - 1) / time.Minute))
	}
	if dflt != "" {
		return dflt
	}
	return "-"
}
