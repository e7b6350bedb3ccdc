package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
)

func newOutboxRetryCmd() *cobra.Command {
	var (
		home   string
		all    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "retry [ID...|--all]",
		Short: "Make waiting outbox rows due now instead of at the end of their backoff",
		Long: `Make outbox rows that wait in backoff due now: the rows of the named messages (to every
host, and their delivery receipts), or every waiting row with --all. Attempts are kept. With a
daemon running, it sends them at once; without one, they leave when ` + "`agentmbx daemon`" + ` starts.
A message with no row that can be retried (unknown, delivered, or at the relay waiting for its
receipt) is an error, and then nothing changes.`,
		Example: `  agentmbx outbox retry --all
  agentmbx outbox retry 01JAAAAAAAAAAAAAAAAAAAAAAA`,
		ValidArgsFunction: completeSentIDs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return usageErr("e.g. `agentmbx outbox retry --all`", "name message ids or --all (not both)")
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				svc, ok := c.Service.(api.OutboxService)
				if !ok {
					return errors.New("this host cannot retry outbox rows")
				}
				ids, err := fullIDs(ctx, c, args)
				if err != nil {
					return err
				}
				res, err := svc.RetryOutbox(ctx, api.RetryRequest{IDs: ids, All: all})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), res)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "%s due now", plural(res.Due, "row", "rows"))
				if res.Already > 0 {
					verb := "were"
					if res.Already == 1 {
						verb = "was"
					}
					fmt.Fprintf(w, " (%d %s due already)", res.Already, verb)
				}
				fmt.Fprintln(w)
				if c.daemon == nil && res.Due+res.Already > 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "no daemon is running: they leave when `agentmbx daemon` starts")
				}
				return nil
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&all, "all", false, "every row that waits in backoff")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON")
	return cmd
}
