package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/termtext"
)

func newSentCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "sent ID [--json]",
		Short: "Show where a sent message is: each recipient's state and each outbox row",
		Long: `Show the delivery state of a message this host sent, per recipient: queued until the
recipient's host confirms it, then delivered, notified, read and acked as signed receipts come
back; and the outbox row of each remote host.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSentIDs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				id, err := fullID(ctx, c, args[0])
				if err != nil {
					return err
				}
				s, err := c.Sent(ctx, id)
				if err != nil {
					return err
				}
				if asJSON {
					if s.Recipients == nil {
						s.Recipients = []api.Recipient{}
					}
					if s.Rows == nil {
						s.Rows = []api.OutboxRow{}
					}
					return printJSON(cmd.OutOrStdout(), s)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "id:      %s\nfrom:    %s\nsubject: %s\n\n", s.ID, s.From, termtext.Line(s.Subject))
				rows := make([][]string, 0, len(s.Recipients))
				for _, r := range s.Recipients {
					rows = append(rows, []string{r.Recipient, r.State, r.At, r.Note})
				}
				if err := table(w, []string{"RECIPIENT", "STATE", "AT", "NOTE"}, rows); err != nil {
					return err
				}
				if len(s.Rows) == 0 {
					return nil
				}
				fmt.Fprintln(w)
				return outboxTable(w, s.Rows)
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
