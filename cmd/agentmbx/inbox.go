package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/termtext"
	"github.com/agentmbx/agentmbx/mbx"
)

func newInboxCmd() *cobra.Command {
	var (
		home, as, since string
		all, asJSON     bool
		wait            time.Duration
		limit           int
	)
	cmd := &cobra.Command{
		Use:   "inbox --as AGENT [--all] [--limit N] [--since ID|DURATION] [--wait DURATION] [--json]",
		Short: "List an agent's mail: unread by default, everything with --all",
		Long: `List an agent's mail: unread by default, everything with --all. It shows the newest
--limit messages (50 by default, at most 500; 0 for all), newest last, and a line saying how
many older ones it left out; --since shows only mail after a message id, or from the last
DURATION (like 2h). --json prints the same messages as a JSON array (the line about the others
goes to stderr). With --wait, when there is no unread mail, wait up to that long for some to
arrive (this needs the daemon running).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 || wait > api.MaxWait {
				return usageErr(fmt.Sprintf("a duration up to %s", api.MaxWait), "inbox: bad --wait %s", wait)
			}
			if wait > 0 && all {
				return usageErr("--wait waits for unread mail; drop --all", "inbox: --wait with --all")
			}
			if limit < 0 || limit > api.MaxPage {
				return usageErr(fmt.Sprintf("from 1 to %d, or 0 for all", api.MaxPage), "inbox: bad --limit %d", limit)
			}
			after, err := sinceID(since, time.Now())
			if err != nil {
				return usageErr("a message id, or a duration like 30m or 2h", "inbox: bad --since %q", since)
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				if wait == 0 { // a wait may be for the mail that creates the agent here
					if err := knownAgent(ctx, c, as); err != nil {
						return err
					}
				}
				var msgs []api.Message
				more := 0
				switch {
				case wait > 0 && c.daemon == nil:
					// Waiting on the store would keep it locked, so no mail could arrive.
					return hint(errors.New("inbox: --wait needs the daemon running"), "start it with `agentmbx daemon`")
				case wait > 0:
					msgs, err = c.Wait(ctx, as, wait)
				case limit == 0:
					msgs, err = c.Inbox(ctx, as, all)
					msgs = slices.DeleteFunc(msgs, func(m api.Message) bool { return after != "" && m.ID <= after })
				default:
					ms, ok := c.Service.(api.MailService)
					if !ok {
						return errors.New("inbox: this host cannot list pages of mail")
					}
					var page api.InboxPage
					page, err = ms.InboxPage(ctx, api.InboxRequest{Agent: as, All: all, Since: after, Limit: limit})
					msgs, more = page.Messages, page.More
				}
				if err != nil {
					return err
				}
				return printInbox(cmd, as, all, asJSON, msgs, more)
			})
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "the local agent whose mail to list", true)
	cmd.Flags().BoolVar(&all, "all", false, "list read and acknowledged mail too")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("show at most this many of the newest messages (1 to %d; 0: all)", api.MaxPage))
	cmd.Flags().StringVar(&since, "since", "", "only mail after this message id, or from the last DURATION (like 2h)")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for unread mail (needs the daemon)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the messages as a JSON array")
	return cmd
}

// printInbox prints a page of mail (a table, or a JSON array) and how many messages it left out.
func printInbox(cmd *cobra.Command, as string, all, asJSON bool, msgs []api.Message, more int) error {
	moreLine := func(w io.Writer) {
		if more > 0 {
			fmt.Fprintf(w, "%s not shown (--limit N, --since ID|DURATION)\n", plural(more, "older message", "older messages"))
		}
	}
	if asJSON {
		if msgs == nil {
			msgs = []api.Message{}
		}
		moreLine(cmd.ErrOrStderr())
		return printJSON(cmd.OutOrStdout(), msgs)
	}
	w := cmd.OutOrStdout()
	if len(msgs) == 0 {
		what := "no unread mail"
		if all {
			what = "no mail"
		}
		_, err := fmt.Fprintf(w, "%s for %s\n", what, as)
		return err
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	short, now := shortIDs(ids), time.Now()
	rows := make([][]string, 0, len(msgs))
	for _, m := range msgs {
		rows = append(rows, []string{short[m.ID], m.State, m.From, m.Kind, m.Subject, ago(m.TS, now)})
	}
	if err := table(w, []string{"ID", "STATE", "FROM", "KIND", "SUBJECT", "AGE"}, rows); err != nil {
		return err
	}
	moreLine(w)
	return nil
}

// sinceID turns --since into a message id to list mail after: an id as given, or for a
// duration the smallest id of the millisecond that long before now.
func sinceID(since string, now time.Time) (string, error) {
	if since == "" {
		return "", nil
	}
	if mbx.ValidULID(since) {
		return since, nil
	}
	d, err := time.ParseDuration(since)
	if err != nil || d <= 0 {
		return "", fmt.Errorf("bad --since %q", since)
	}
	return mbx.NewULIDs(zeroReader{}).New(now.Add(-d)), nil
}

// zeroReader reads zeros: a ULID drawn from it has the lowest random part.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// knownAgent fails with "no such agent" (exit 1) when name is not an agent of this host, so that
// a typo in --as does not look like an empty mailbox.
func knownAgent(ctx context.Context, c *conn, name string) error {
	agents, err := c.Agents(ctx)
	if err != nil {
		return err
	}
	for _, a := range agents {
		if a.Name == name {
			return nil
		}
	}
	return hint(fmt.Errorf("no such agent %q on this host", name), "`agentmbx agents` lists this host's agents")
}

func newReadCmd() *cobra.Command {
	var (
		home, as string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "read ID --as AGENT [--json]",
		Short: "Show one message of an agent's and mark it read",
		Long: `Show one message of an agent's and mark it read. ID may be the start of the id (at least
8 characters, as the tables show them) when no other message begins with it.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeMailIDs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				id, err := fullID(ctx, c, args[0])
				if err != nil {
					return err
				}
				m, err := c.Read(ctx, api.ReadRequest{ID: id, Agent: as})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), m)
				}
				return printMessage(cmd, m)
			})
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "the local agent the message was sent to", true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the message as JSON")
	return cmd
}

// printMessage prints a message's headers, a blank line and its body. Control characters a peer
// put in the body (terminal escape sequences, carriage returns) are shown as \xNN text rather
// than sent to the terminal; --json gives the body exactly as it came.
func printMessage(cmd *cobra.Command, m api.Message) error {
	w := cmd.OutOrStdout()
	hdr := [][2]string{
		{"id", m.ID}, {"from", m.From}, {"to", strings.Join(m.To, ", ")}, {"subject", m.Subject},
		{"kind", m.Kind}, {"ts", m.TS}, {"thread", m.Thread}, {"reply-to", m.ReplyTo}, {"state", m.State},
	}
	if m.NeedsReply {
		hdr = append(hdr, [2]string{"needs-reply", "yes"})
	}
	if m.Note != "" {
		hdr = append(hdr, [2]string{"note", m.Note})
	}
	for _, h := range hdr {
		if h[1] != "" {
			fmt.Fprintf(w, "%-9s %s\n", h[0]+":", termtext.Line(h[1]))
		}
	}
	body := termtext.Block(m.Body)
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	_, err := fmt.Fprintf(w, "\n%s", body)
	return err
}

func newAckCmd() *cobra.Command {
	var (
		home, as, note string
		all, asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "ack (ID... | --all) --as AGENT [--note N] [--json]",
		Short: "Acknowledge messages (their senders see it in `agentmbx sent`)",
		Long: `Acknowledge messages of an agent's: the ids given (or the start of each, as the tables show
them), or with --all every message in the agent's mailbox not acknowledged yet. Each sender sees
the acknowledgement, with the note, in ` + "`agentmbx sent`" + `. Every id is checked before any is
acknowledged. --json prints the acknowledged messages as a JSON array.`,
		Example: `  agentmbx ack --as bob 01KBN3V4Q0X5 --note thanks
  agentmbx ack --as bob 01KBN3V4Q0X5 01KBN3V4R7A2
  agentmbx ack --as bob --all`,
		ValidArgsFunction: completeMailIDs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return usageErr("e.g. `agentmbx ack --as bob ID` or `agentmbx ack --as bob --all`", "ack: name message ids or --all (not both)")
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				ids, err := ackIDs(ctx, c, as, args, all)
				if err != nil {
					return err
				}
				acked := []api.Message{}
				for _, id := range ids {
					m, err := c.Ack(ctx, api.AckRequest{ID: id, Agent: as, Note: note})
					if err != nil {
						if len(acked) > 0 {
							err = fmt.Errorf("%w (%s acknowledged before it)", err, plural(len(acked), "message", "messages"))
						}
						return err
					}
					acked = append(acked, m)
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), acked)
				}
				w := cmd.OutOrStdout()
				if len(acked) == 0 {
					_, err := fmt.Fprintf(w, "nothing to acknowledge for %s\n", as)
					return err
				}
				for _, m := range acked {
					fmt.Fprintf(w, "acked %s\n", m.ID)
				}
				return nil
			})
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "the local agent the messages were sent to", true)
	cmd.Flags().BoolVar(&all, "all", false, "every message in the agent's mailbox not acknowledged yet")
	cmd.Flags().StringVar(&note, "note", "", "a note for the senders (at most 500 characters)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the acknowledged messages as a JSON array")
	return cmd
}

// ackIDs are the ids an ack names in full: the arguments resolved (all of them before any ack),
// or with all the agent's messages not acknowledged yet, oldest first.
func ackIDs(ctx context.Context, c *conn, agent string, args []string, all bool) ([]string, error) {
	if !all {
		ids, err := fullIDs(ctx, c, args)
		return slices.Compact(ids), err
	}
	if err := knownAgent(ctx, c, agent); err != nil {
		return nil, err
	}
	msgs, err := c.Inbox(ctx, agent, true)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range msgs {
		if m.State != "acked" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
}
