package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/termtext"
)

// mailOf is the host's api.MailService (a daemon's and an open store's both are one).
func mailOf(c *conn) (api.MailService, error) {
	ms, ok := c.Service.(api.MailService)
	if !ok {
		return nil, errors.New("this host has no threads, search or replies")
	}
	return ms, nil
}

func newThreadCmd() *cobra.Command {
	var (
		home, as string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "thread ID [--as AGENT] [--json]",
		Short: "Show the messages of a message's thread, oldest first",
		Long: `Show the thread of a message (or a thread id), oldest first, with whole bodies. With --as,
only that agent's mail in it (received and sent); without, all of this host's. Nothing is marked
read.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeMailIDs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				ms, err := mailOf(c)
				if err != nil {
					return err
				}
				id := args[0]
				if full, err := fullID(ctx, c, id); err == nil {
					id = full // else a thread id, which names no message
				}
				t, err := ms.Thread(ctx, api.ThreadRequest{Agent: as, ID: id})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), t)
				}
				return printThread(cmd, t)
			})
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "show only this local agent's mail in the thread", false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the thread as JSON")
	return cmd
}

// printThread prints each message of a thread: a header line, the subject and the body (with
// control characters shown as text, as read does).
func printThread(cmd *cobra.Command, t api.Thread) error {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "thread %s: %s\n", t.Thread, plural(len(t.Messages), "message", "messages"))
	if t.Earlier > 0 {
		fmt.Fprintf(w, "(%d earlier messages not shown; --json shows the same)\n", t.Earlier)
	}
	for _, m := range t.Messages {
		body := termtext.Block(m.Body)
		if !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
		fmt.Fprintf(w, "\n── %s  %s  %s  [%s]\nsubject: %s\n\n%s", m.ID, m.TS, termtext.Line(m.From), m.State, termtext.Line(m.Subject), body)
	}
	return nil
}

func newSearchCmd() *cobra.Command {
	var (
		home, as string
		limit    int
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "search QUERY... [--as AGENT] [--limit N] [--json]",
		Short: "Find messages whose subject or body holds every word of the query",
		Long: `Find messages whose subject or body holds every word of the query (words are letters and
digits; case does not matter), newest first. With --as, that agent's mail (received and sent);
without, all of this host's. It reads a word index, so it stays fast on large mailboxes.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 || limit > api.MaxPage {
				return usageErr(fmt.Sprintf("1 to %d", api.MaxPage), "search: bad --limit %d", limit)
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				ms, err := mailOf(c)
				if err != nil {
					return err
				}
				res, err := ms.Search(ctx, api.SearchRequest{Agent: as, Query: strings.Join(args, " "), Limit: limit})
				if err != nil {
					return err
				}
				if asJSON {
					// Like every listing: the rows as an array, the note about more on stderr.
					if res.More {
						fmt.Fprintln(cmd.ErrOrStderr(), moreMatches)
					}
					if res.Messages == nil {
						res.Messages = []api.Message{}
					}
					return printJSON(cmd.OutOrStdout(), res.Messages)
				}
				return printSearch(cmd, res)
			})
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "search only this local agent's mail", false)
	cmd.Flags().IntVar(&limit, "limit", api.DefaultPage, "show at most this many matches")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the matches as a JSON array")
	return cmd
}

// moreMatches is the line that says a search left matches out.
const moreMatches = "(more matches: raise --limit or add words)"

func printSearch(cmd *cobra.Command, res api.SearchResult) error {
	w := cmd.OutOrStdout()
	if len(res.Messages) == 0 {
		_, err := fmt.Fprintf(w, "no messages match \"%s\"\n", termtext.Line(res.Query))
		return err
	}
	ids := make([]string, len(res.Messages))
	for i, m := range res.Messages {
		ids[i] = m.ID
	}
	short, now := shortIDs(ids), time.Now()
	rows := make([][]string, 0, len(res.Messages))
	for _, m := range res.Messages {
		rows = append(rows, []string{short[m.ID], m.State, m.From, m.Subject, ago(m.TS, now)})
	}
	if err := table(w, []string{"ID", "STATE", "FROM", "SUBJECT", "AGE"}, rows); err != nil {
		return err
	}
	if res.More {
		_, err := fmt.Fprintln(w, moreMatches)
		return err
	}
	return nil
}

func newReplyCmd() *cobra.Command {
	var (
		home, as, subject, kind, body, bodyFile string
		asJSON                                  bool
	)
	cmd := &cobra.Command{
		Use:   "reply ID --as AGENT (-m BODY | --body-file F) [--subject S]",
		Short: "Answer a message's sender, in its thread, and print the new message's id",
		Long: `Answer a message of the agent's: the reply goes to its sender (to its recipients when the
agent sent it), in its thread, with reply-to set; the subject is "Re: " and the original's unless
--subject is given. Like send, the id is printed once the reply is durable.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeMailIDs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := bodyFromFlags(cmd, "reply", body, bodyFile)
			if err != nil {
				return err
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				ms, err := mailOf(c)
				if err != nil {
					return err
				}
				id, err := fullID(ctx, c, args[0])
				if err != nil {
					return err
				}
				res, err := ms.Reply(ctx, api.ReplyRequest{From: as, ID: id, Body: body, Subject: subject, Kind: kind})
				if err != nil {
					return err
				}
				return printSendResult(cmd, res, asJSON)
			})
		},
	}
	addHomeFlag(cmd, &home)
	f := cmd.Flags()
	addAgentFlag(cmd, &as, "the local agent that received the message", true)
	f.StringVarP(&body, "message", "m", "", "the body")
	f.StringVar(&bodyFile, "body-file", "", "read the body from a file (- for standard input)")
	f.StringVar(&subject, "subject", "", `subject line (default "Re: " and the original's)`)
	f.StringVar(&kind, "kind", "", "message kind (default reply)")
	f.BoolVar(&asJSON, "json", false, "print the id and where the reply went as JSON")
	return cmd
}

// bodyFromFlags is the body a send or reply got: -m TEXT (body) or --body-file F (- for standard
// input), exactly one of them.
func bodyFromFlags(cmd *cobra.Command, op, body, bodyFile string) (string, error) {
	hasBody, hasFile := cmd.Flags().Changed("message"), cmd.Flags().Changed("body-file")
	switch {
	case hasBody && hasFile:
		return "", usageErr("give the body once", "%s: both -m and --body-file", op)
	case !hasBody && !hasFile:
		return "", usageErr("give the body with -m TEXT, or --body-file FILE (- for standard input)", "%s: no body", op)
	case hasFile:
		b, err := readInput(cmd, bodyFile, maxBodyFile)
		if err != nil {
			return "", fmt.Errorf("%s: body: %w", op, err)
		}
		return string(b), nil
	}
	return body, nil
}

// printSendResult prints a new message's id, or where it went as JSON.
func printSendResult(cmd *cobra.Command, res api.SendResult, asJSON bool) error {
	if asJSON {
		return printJSON(cmd.OutOrStdout(), res)
	}
	_, err := fmt.Fprintln(cmd.OutOrStdout(), res.ID)
	return err
}
