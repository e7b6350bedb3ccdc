package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
)

func newInboxCmd() *cobra.Command {
	var (
		home, as    string
		all, asJSON bool
		wait        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "inbox --as AGENT [--all] [--wait DURATION] [--json]",
		Short: "List an agent's mail: unread by default, everything with --all",
		Long: `List an agent's mail: unread by default, everything with --all. With --wait, when there is
no unread mail, wait up to that long for some to arrive (this needs the daemon running).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 || wait > api.MaxWait {
				return usageErr(fmt.Sprintf("a duration up to %s", api.MaxWait), "inbox: bad --wait %s", wait)
			}
			if wait > 0 && all {
				return usageErr("--wait waits for unread mail; drop --all", "inbox: --wait with --all")
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				var msgs []api.Message
				var err error
				switch {
				case wait > 0 && c.daemon == nil:
					// Waiting on the store would keep it locked, so no mail could arrive.
					return hint(errors.New("inbox: --wait needs the daemon running"), "start it with `agentmbx daemon`")
				case wait > 0:
					msgs, err = c.Wait(ctx, as, wait)
				default:
					msgs, err = c.Inbox(ctx, as, all)
				}
				if err != nil {
					return err
				}
				if asJSON {
					if msgs == nil {
						msgs = []api.Message{}
					}
					return printJSON(cmd.OutOrStdout(), msgs)
				}
				if len(msgs) == 0 {
					what := "no unread mail"
					if all {
						what = "no mail"
					}
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s for %s\n", what, as)
					return err
				}
				rows := make([][]string, 0, len(msgs))
				for _, m := range msgs {
					rows = append(rows, []string{m.ID, m.State, m.From, m.Kind, m.Subject, m.TS})
				}
				return table(cmd.OutOrStdout(), []string{"ID", "STATE", "FROM", "KIND", "SUBJECT", "TS"}, rows)
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().StringVar(&as, "as", "", "the local agent whose mail to list")
	cmd.Flags().BoolVar(&all, "all", false, "list read and acknowledged mail too")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for unread mail (needs the daemon)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the messages as a JSON array")
	cmd.MarkFlagRequired("as")
	return cmd
}

func newReadCmd() *cobra.Command {
	var (
		home, as string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "read ID --as AGENT [--json]",
		Short: "Show one message of an agent's and mark it read",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				m, err := c.Read(ctx, api.ReadRequest{ID: args[0], Agent: as})
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
	cmd.Flags().StringVar(&as, "as", "", "the local agent the message was sent to")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the message as JSON")
	cmd.MarkFlagRequired("as")
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
			fmt.Fprintf(w, "%-9s %s\n", h[0]+":", oneLineFull(h[1]))
		}
	}
	body := visibleControls(m.Body)
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	_, err := fmt.Fprintf(w, "\n%s", body)
	return err
}

// visibleControls writes every control character but newline and tab as \xNN text.
func visibleControls(s string) string {
	if !strings.ContainsFunc(s, isHiddenControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isHiddenControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isHiddenControl(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f)
}

// oneLineFull keeps a header on its line: control characters become spaces, nothing is cut.
func oneLineFull(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 {
			return ' '
		}
		return r
	}, s)
}

func newAckCmd() *cobra.Command {
	var (
		home, as, note string
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "ack ID --as AGENT [--note N]",
		Short: "Acknowledge a message (the sender sees it in `agentmbx sent`)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				m, err := c.Ack(ctx, api.AckRequest{ID: args[0], Agent: as, Note: note})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), m)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "acked %s\n", m.ID)
				return err
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().StringVar(&as, "as", "", "the local agent the message was sent to")
	cmd.Flags().StringVar(&note, "note", "", "a note for the sender (at most 500 characters)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the acknowledged message as JSON")
	cmd.MarkFlagRequired("as")
	return cmd
}
