package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/internal/version"
)

// Main runs the agentmbx command line with args (without the program name). It is what main calls
// and what tests call, with their own streams.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRootCmd()
	started := markStart(root)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	_, err := root.ExecuteContextC(ctx)
	var es *exitStatus
	if err != nil && !errors.As(err, &es) {
		if !*started {
			// cobra refused the call before the command's work began: an unknown command or
			// flag, a wrong number of arguments, a required flag missing.
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
	root.AddCommand(newThreadCmd(), newSearchCmd(), newReplyCmd(), newMCPCmd(), newNotifyCmd())
	root.AddCommand(newAgentsCmd(), newPeersCmd())
	root.AddCommand(newPairCmd(), newJoinCmd())
	root.AddCommand(newRelayCmd())
	root.AddCommand(newDoctorCmd(), newDemoCmd(), newManCmd())
	setExamples(root)
	applyConventions(root)
	explainStates(root)
	return root
}

// markStart wraps the Run and RunE of every command under root so that the flag it returns is
// set once a command's own work begins; an error before that is one of how it was called.
func markStart(root *cobra.Command) *bool {
	started := new(bool)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { *started = true; return run(cmd, args) }
		} else if run := c.Run; run != nil {
			c.Run = func(cmd *cobra.Command, args []string) { *started = true; run(cmd, args) }
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return started
}
