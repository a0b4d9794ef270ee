package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time for a release, with
// -ldflags "-X main.version=v1.2.3".
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
				bi, _ := debug.ReadBuildInfo()
				v = buildVersion(bi)
			}
			fmt.Fprintln(s.out, "gpudispatch", v)
			return nil
		},
	}
}

// buildVersion says which gpudispatch this is when no release version was
// set: the module's version (go install ...@v1.2.3), else the commit it
// was built from, its date, and whether the tree had changes.
func buildVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel (no build information)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	rev := vcs["vcs.revision"]
	if rev == "" {
		return "devel (built without version control information)"
	}
	v := "devel " + rev[:min(12, len(rev))]
	if t := vcs["vcs.time"]; len(t) >= 10 {
		v += " of " + t[:10]
	}
	if vcs["vcs.modified"] == "true" {
		v += ", with uncommitted changes"
	}
	return v
}
