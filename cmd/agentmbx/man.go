package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd is `agentmbx gen-man DIR` (hidden; `make man` runs it): a man page for every
// command, generated from the commands themselves (cobra/doc), in section 1.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write a man page for every command into DIR (make man)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // no date in the pages: the same build writes the same pages
			hdr := &doc.GenManHeader{Title: "AGENTMBX", Section: "1", Source: "agentmbx " + root.Version, Manual: "agentmbx manual"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "man pages in %s (man -l %s/agentmbx.1)\n", args[0], args[0])
			return nil
		},
	}
}
