package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/internal/version"
)

// newVersionCmd is `agentmbx version [--json]`; the root's --version prints the same first line.
func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version of agentmbx and of the wire format it speaks",
		Long: `Print this build's version: the module version (or what 'make build' stamped from git) and
the VCS revision, the Go toolchain, and the AgentMBX wire format it speaks. The host's LAN status
and the relay's info report the same version string.`,
		Example: `  agentmbx version
  agentmbx --version
  agentmbx version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := version.Get()
			if asJSON {
				return printJSON(cmd.OutOrStdout(), struct {
					version.Info
					String string `json:"string"`
				}{in, in.String()})
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine(in))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build's version, revision, Go version and wire format as JSON")
	return cmd
}

// versionLine is what `agentmbx --version` and `agentmbx version` print.
func versionLine(in version.Info) string {
	rev := in.Revision
	if rev == "" {
		rev = "unknown revision"
	} else if in.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("agentmbx %s (%s; wire format AgentMBX %s, %s)", in, rev, in.Wire, in.Go)
}
