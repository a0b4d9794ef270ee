package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func newVersionCommand(s streams) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of gpudispatch",
		Example: "  gpudispatch version",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := version
			if v == "" {
				v = "(devel)"
				if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
					v = bi.Main.Version
				}
			}
			fmt.Fprintln(s.out, "gpudispatch", v)
			return nil
		},
	}
}
