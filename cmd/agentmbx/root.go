package main

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/internal/version"
)

// Main runs the agentmbx command line with args (without the program name). It is what main calls
// and what tests call, with their own streams.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var es *exitStatus
	if err != nil && !errors.As(err, &es) {
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
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetVersionTemplate(versionLine(version.Get()) + "\n")
	root.AddCommand(newVersionCmd())
	root.AddCommand(newInitCmd(), newDaemonCmd(), newIDCmd())
	root.AddCommand(newSendCmd(), newInboxCmd(), newReadCmd(), newAckCmd())
	root.AddCommand(newSentCmd(), newOutboxCmd())
	root.AddCommand(newThreadCmd(), newSearchCmd(), newReplyCmd(), newMCPCmd())
	root.AddCommand(newAgentsCmd(), newPeersCmd())
	root.AddCommand(newPairCmd(), newJoinCmd())
	root.AddCommand(newRelayCmd())
	root.AddCommand(newDoctorCmd(), newDemoCmd(), newManCmd())
	setExamples(root)
	applyConventions(root)
	explainStates(root)
	return root
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
