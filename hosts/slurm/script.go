package slurm

import (
	"fmt"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
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
	if c.Nodes > 1 {
		// A job over several nodes: the script runs on the first, which
		// is part 0's (MASTER_ADDR, and its free port); srun runs the line
		// once on every node (one task each, with the node's GPUs), each
		// told its rank, and ends them all once one fails.
		b.WriteString(`_g_nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)` + "\n")
		b.WriteString(`export NNODES="$SLURM_JOB_NUM_NODES" MASTER_ADDR="${_g_nodes%%,*}" GPUDISPATCH_NODES="$_g_nodes"` + "\n")
		b.WriteString(fmt.Sprintf(`export WORLD_SIZE=$((SLURM_JOB_NUM_NODES * %d))`, max(c.GPUs, 1)) + "\n")
		b.WriteString("MASTER_PORT=$(" + strings.TrimSpace(spawn.FreePort) + ") || _g_end 1\nexport MASTER_PORT\n")
		// The first part to fail says its exit status, which is the job's
		// (srun's own is the highest of all, the parts it ended included).
		// Part K writes TAG.rankK.out and .err, which the agent sends
		// home as the batch job's own output.
		b.WriteString(`_g_part="$SLURM_SUBMIT_DIR/` + tag + `" _g_first="$SLURM_SUBMIT_DIR/` + tag + `.first"` + "\nexport _g_part _g_first\n")
		b.WriteString(`srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c 'export NODE_RANK=$SLURM_NODEID; ` +
			`if [ "$NODE_RANK" != 0 ]; then exec >"$_g_part.rank$NODE_RANK.out" 2>"$_g_part.rank$NODE_RANK.err"; fi; "$@"; s=$?; ` +
			`if [ "$s" != 0 ] && mkdir "$_g_first" 2>/dev/null; then echo "$s" >"$_g_first/code"; fi; exit "$s"' bash `)
	}
	// The job line is evaluated from the login shell's first line, with no
	// positional parameters: bash's messages about it give its own line
	// numbers, as under bash -c, not those of the activation before it.
	b.WriteString(`"${SHELL:-/bin/bash}" -lc 'eval "$1" || exit; _g_s=$2; set --; eval "unset -v _g_s; $_g_s"' bash ` +
		shellescape.Quote(pre) + " " + shellescape.Quote(c.Script) + "\n")
	if c.Nodes > 1 {
		b.WriteString(`_g_s=$?; if [ -s "$_g_first/code" ]; then _g_s=$(cat "$_g_first/code"); fi; rm -rf "$_g_first"; _g_end "$_g_s"` + "\n")
		return b.String()
	}
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
