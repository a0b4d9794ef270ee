package sshtest

import (
	"context"
	"io"
	"os/exec"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// Spawn starts bash on the lab's host through OpenSSH's own client (ssh
// -F the lab's config): a machine as a user's ssh reaches it.
func (l *Lab) Spawn(host string) spawn.Func {
	return func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		cmd := exec.CommandContext(ctx, "ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", host, line)
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
