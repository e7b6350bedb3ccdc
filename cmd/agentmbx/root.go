package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Version is the release of this build; set with -ldflags "-X main.Version=…".
var Version = "0.1.0-dev"

// wireVersion is the AgentMBX wire-format line this build speaks.
const wireVersion = "0.5"

// Main runs the agentmbx command line with args (without the program name). It is what main calls
// and what tests call, with their own streams.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		if isUsageErr(cmd, err) {
			err = &usageError{err}
		}
		printErr(stderr, err)
	}
	return err
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "agentmbx",
		Short:         "Mail between AI agents on different machines, never lost or duplicated",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd())
	root.AddCommand(newInitCmd(), newDaemonCmd(), newIDCmd())
	root.AddCommand(newSendCmd(), newInboxCmd(), newReadCmd(), newAckCmd())
	root.AddCommand(newSentCmd(), newOutboxCmd())
	root.AddCommand(newAgentsCmd(), newPeersCmd())
	root.AddCommand(newPairCmd(), newJoinCmd())
	root.AddCommand(newRelayCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of agentmbx and of the wire format it speaks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "agentmbx %s (wire format AgentMBX %s.x, %s)\n", Version, wireVersion, goVersion)
			return err
		},
	}
}

// isUsageErr tells cobra's own argument and flag errors from the errors of a command's work.
func isUsageErr(cmd *cobra.Command, err error) bool {
	if cmd == nil {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires ", "flag needs an argument", "invalid argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
