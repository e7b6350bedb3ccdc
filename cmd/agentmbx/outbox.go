package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
)

func newOutboxCmd() *cobra.Command {
	var (
		home        string
		states      []string
		all, asJSON bool
		limit       int
	)
	cmd := &cobra.Command{
		Use:   "outbox [--state S] [--all] [--limit N] [--json]",
		Short: "List the outbox: one row per message and remote host",
		Long: `List the outbox: one row per message (or delivery receipt) and remote host. By default
it lists the rows still waiting (pending, relay-accepted); --all adds the finished ones, and
--state lists only rows in the states named (repeat it or separate with commas; a final state
lists finished rows without --all). It shows the newest --limit rows (50 by default, at most
500; 0 for all), newest last, and a line saying how many older ones it left out. WHY says why
a row waits (no daemon, the relay stopped or paused, the peer unreachable since when, a quota,
the next attempt), or why it ended. --json prints the same rows as a JSON array, with the
reason in "waiting" (the line about the others goes to stderr).

States: pending (not accepted yet; retried at NEXT_AT), relay-accepted (the relay holds it until
the peer's receipt), done (delivered), and the final states without a delivery: expired,
unconfirmed (no receipt in time after the relay accepted it) and rejected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 || limit > api.MaxPage {
				return usageErr(fmt.Sprintf("from 1 to %d, or 0 for all", api.MaxPage), "outbox: bad --limit %d", limit)
			}
			for _, s := range states {
				if !slices.Contains(api.OutboxStates(), s) {
					return usageErr("one of "+strings.Join(api.OutboxStates(), ", "), "outbox: bad --state %q", s)
				}
			}
			req := api.OutboxRequest{States: slices.Compact(slices.Sorted(slices.Values(states))), All: all, Limit: limit}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				page, err := outboxPage(ctx, c, req)
				if err != nil {
					return err
				}
				if asJSON {
					moreRows(cmd.ErrOrStderr(), page.More)
					return printJSON(cmd.OutOrStdout(), nonNilRows(page.Rows))
				}
				if len(page.Rows) == 0 {
					return noRows(ctx, cmd.OutOrStdout(), c, req)
				}
				if err := outboxTable(cmd.OutOrStdout(), page.Rows); err != nil {
					return err
				}
				moreRows(cmd.OutOrStdout(), page.More)
				return nil
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().StringSliceVar(&states, "state", nil, "list only rows in these states (repeat, or separate with commas)")
	cmd.Flags().BoolVar(&all, "all", false, "list finished rows too (done, expired, unconfirmed, rejected)")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("show at most this many of the newest rows (1 to %d; 0: all)", api.MaxPage))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rows as a JSON array")
	cmd.AddCommand(newOutboxRetryCmd())
	return cmd
}

// outboxPage lists the page req asks for: on the host's pages, or with Limit 0 every row
// (Outbox) filtered here.
func outboxPage(ctx context.Context, c *conn, req api.OutboxRequest) (api.OutboxPage, error) {
	if req.Limit > 0 {
		os, ok := c.Service.(api.OutboxService)
		if !ok {
			return api.OutboxPage{}, errors.New("outbox: this host cannot list pages of its outbox")
		}
		return os.OutboxPage(ctx, req)
	}
	rows, err := c.Outbox(ctx)
	if err != nil {
		return api.OutboxPage{}, err
	}
	rows = slices.DeleteFunc(rows, func(r api.OutboxRow) bool { return !wanted(req, r.State) })
	return api.OutboxPage{Rows: rows}, nil
}

// wanted reports whether a row in state belongs to what req asks for.
func wanted(req api.OutboxRequest, state string) bool {
	switch {
	case len(req.States) > 0:
		return slices.Contains(req.States, state)
	case req.All:
		return true
	}
	return state == "pending" || state == "relay-accepted"
}

// noRows says that nothing matched; for the default listing it tells an empty outbox from one
// with only finished rows.
func noRows(ctx context.Context, w io.Writer, c *conn, req api.OutboxRequest) error {
	if len(req.States) > 0 {
		_, err := fmt.Fprintf(w, "no outbox rows in state %s\n", strings.Join(req.States, ", "))
		return err
	}
	if !req.All {
		ended, err := outboxPage(ctx, c, api.OutboxRequest{All: true, Limit: 1})
		if err != nil {
			return err
		}
		if n := len(ended.Rows) + ended.More; n > 0 {
			_, err := fmt.Fprintf(w, "nothing waiting in the outbox; %s (--all lists them)\n", plural(n, "finished row", "finished rows"))
			return err
		}
	}
	_, err := fmt.Fprintln(w, "the outbox is empty")
	return err
}

// moreRows says how many older rows a page left out.
func moreRows(w io.Writer, more int) {
	if more > 0 {
		fmt.Fprintf(w, "%s not shown (--limit N, --state S, --all)\n", plural(more, "older row", "older rows"))
	}
}

func nonNilRows(rows []api.OutboxRow) []api.OutboxRow {
	if rows == nil {
		return []api.OutboxRow{}
	}
	return rows
}

// outboxTable shows rows with WHY: for a waiting row why it waits, for a finished one why it
// ended (LAST_ERROR, which the reason may make moot, is in --json). KIND tells a message's row
// (envelope) from a delivery receipt's (receipt), which carries the id of the message it is for. WHY
// is shown whole; a narrow terminal loses NEXT, TRANSPORT and ATTEMPTS first.
func outboxTable(w io.Writer, rows []api.OutboxRow) error {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.MsgID
	}
	short, now := shortIDs(ids), time.Now()
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, []string{short[r.MsgID], r.Kind, r.Host, r.State, r.Transport, strconv.Itoa(r.Attempts), ago(r.NextAt, now), why(r)})
	}
	return tbl{header: []string{"MSG_ID", "KIND", "HOST", "STATE", "TRANSPORT", "ATTEMPTS", "NEXT", "WHY"}, rows: out, whole: 7,
		spare: []int{6, 4, 5}}.write(w) // NEXT (WHY says it), TRANSPORT, ATTEMPTS
}

// why is a row's WHY: the host's wait reason, the reason it ended, or its last error (from a
// daemon that gives no reason).
func why(r api.OutboxRow) string {
	switch {
	case r.Waiting != "":
		return r.Waiting
	case r.Reason != "":
		return r.Reason
	}
	return r.LastError
}
