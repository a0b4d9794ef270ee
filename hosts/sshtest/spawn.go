package sshtest

import (
	"context"
	"io"
	"os/exec"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// Spawn starts bash on the lab's host through OpenSSH's own client (ssh
// -F the lab's config, and options, each an ssh -o one): a machine as a
// user's ssh reaches it.
func (l *Lab) Spawn(host string, options ...string) spawn.Func {
	args := []string{"-F", l.SSHConfig, "-o", "BatchMode=yes"}
	for _, o := range options {
		args = append(args, "-o", o)
	}
	return func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		cmd := exec.CommandContext(ctx, "ssh", append(args, host, line)...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return &spawn.Proc{Stdin: in, Wait: cmd.Wait}, nil
	}
}
