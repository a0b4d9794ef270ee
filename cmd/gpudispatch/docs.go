package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newDocsCommand writes the command reference from the commands
// themselves, so that --help, the man pages and docs/cli never disagree:
// Markdown (docs/cli is that, checked in and tested for staleness) and,
// with --man, man pages. Hidden: it is for the project and for packagers.
func newDocsCommand() *cobra.Command {
	var man bool
	cmd := &cobra.Command{
		Use:   "docs DIR",
		Short: "Write the command reference into DIR: Markdown, or man pages with --man",
		Example: `  gpudispatch docs docs/cli            # the Markdown reference, checked in
  gpudispatch docs --man /usr/local/share/man/man1`,
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeDocs(cmd.Root(), args[0], man)
		},
	}
	cmd.Flags().BoolVar(&man, "man", false, "write man pages (section 1) rather than Markdown")
	return cmd
}

// writeDocs writes root's reference into dir.
func writeDocs(root *cobra.Command, dir string, man bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("docs: %w", err)
	}
	root.DisableAutoGenTag = true // no date: the files change only when the commands do
	if man {
		return doc.GenManTree(root, &doc.GenManHeader{Title: "GPUDISPATCH", Section: "1", Source: "gpudispatch"}, dir)
	}
	return doc.GenMarkdownTreeCustom(root, dir, func(string) string { return "" }, func(name string) string {
		return filepath.Base(name)
	})
}
