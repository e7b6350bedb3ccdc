package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
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
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				s, err := c.Sent(ctx, args[0])
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
				fmt.Fprintf(w, "id:      %s\nfrom:    %s\nsubject: %s\n\n", s.ID, s.From, oneLineFull(s.Subject))
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

func newOutboxCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "outbox [--json]",
		Short: "List the outbox: one row per message and remote host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				rows, err := c.Outbox(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if rows == nil {
						rows = []api.OutboxRow{}
					}
					return printJSON(cmd.OutOrStdout(), rows)
				}
				if len(rows) == 0 {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), "the outbox is empty")
					return err
				}
				return outboxTable(cmd.OutOrStdout(), rows)
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rows as a JSON array")
	cmd.AddCommand(newOutboxRetryCmd())
	return cmd
}

func outboxTable(w interface{ Write([]byte) (int, error) }, rows []api.OutboxRow) error {
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, []string{r.MsgID, r.Host, r.State, r.Transport, strconv.Itoa(r.Attempts), r.NextAt, r.LastError})
	}
	// LAST_ERROR is last so that it can be shown whole: a cut error hides its cause.
	return tableFullLast(w, []string{"MSG_ID", "HOST", "STATE", "TRANSPORT", "ATTEMPTS", "NEXT_AT", "LAST_ERROR"}, out, true)
}
