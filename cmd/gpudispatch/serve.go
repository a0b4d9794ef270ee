package main

import (
	"context"

	"github.com/spf13/cobra"
)

func newServeCommand(s streams, runF func(context.Context, streams, runOptions) error) *cobra.Command {
	cmd := runLikeCommand(s, runF, true)
	cmd.Use = "serve [flags]"
	cmd.Short = "Hold a standing queue that submit, cancel, retry, priority and stop steer"
	cmd.Long = `Run a standing queue on the hosts: a run whose input never ends. Jobs
arrive with "gpudispatch submit -o LOGDIR"; "status", "cancel", "retry",
"priority" and "stop" reach it through LOGDIR/gpudispatch.sock. The log dir
names the server: one server per log dir. Numbers go on from the jobs of
the log dir's journal; --resume queues again what an earlier server left
waiting or running (stopped or killed), with its priority.

` + exitHelp(func(c exitCode) string { return c.run })
	cmd.Example = `  gpudispatch serve -i lab.yaml -o ~/gpd                         # then: gpudispatch submit -o ~/gpd < jobs.txt
  gpudispatch serve -i lab.yaml -o ~/gpd --listen 127.0.0.1:8080 # with its web page
  gpudispatch serve -i lab.yaml -o ~/gpd --resume                # after a stop or a crash`
	cmd.Args = cobra.NoArgs
	return cmd
}
