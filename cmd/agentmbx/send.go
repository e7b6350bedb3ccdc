package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
)

// maxBodyFile caps what send reads from --body-file; the host refuses bodies over 256 KiB anyway,
// and this keeps a wrong file from being read whole.
const maxBodyFile = 1 << 20

func newSendCmd() *cobra.Command {
	var (
		home, as, subject, kind, body, bodyFile, thread, replyTo string
		to                                                       []string
		needsReply, asJSON                                       bool
	)
	cmd := &cobra.Command{
		Use:   "send --as AGENT --to ADDR[,ADDR...] [--subject S] [--kind K] (-m BODY | --body-file F)",
		Short: "Send a message and print its id",
		Long: `Send a message from a local agent. Addresses: name@host (an agent of this or a paired host),
a bare name (that agent here and on every paired host), role:ROLE, '*' (quoted, or the shell
expands it: every agent here and on every paired host) and owner. The message id is printed once the message is durable: delivered
to the local recipients and queued for each remote host. Sending to name@host when that host's
last known roster (the agents this host had mail from there or sent to) lacks the name warns on
stderr; the mail is still sent (the peer creates that mailbox when it arrives).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var addrs []string
			for _, t := range to {
				for _, a := range strings.Split(t, ",") {
					if a = strings.TrimSpace(a); a != "" {
						addrs = append(addrs, a)
					}
				}
			}
			if len(addrs) == 0 {
				return usageErr("name recipients like --to bob@desk,role:reviewer", "send: no recipients")
			}
			body, err := bodyFromFlags(cmd, "send", body, bodyFile)
			if err != nil {
				return err
			}
			req := api.SendRequest{From: as, To: addrs, Subject: subject, Body: body, Kind: kind,
				Thread: thread, ReplyTo: replyTo, NeedsReply: needsReply}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				warnings := rosterWarnings(ctx, c, addrs)
				res, err := c.Send(ctx, req)
				if err != nil {
					return err
				}
				for _, w := range warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), w)
				}
				if c.daemon == nil && len(res.Hosts) > 0 {
					// On the store: nothing leaves this machine until a daemon runs.
					fmt.Fprintf(cmd.ErrOrStderr(), "no daemon is running: the message is queued for %s and leaves when `agentmbx daemon` starts\n",
						strings.Join(res.Hosts, ", "))
				}
				return printSendResult(cmd, res, asJSON)
			})
		},
	}
	addHomeFlag(cmd, &home)
	f := cmd.Flags()
	addAgentFlag(cmd, &as, "the sending local agent (registered on first use)", true)
	f.StringSliceVar(&to, "to", nil, "recipients, comma separated or repeated")
	f.StringVar(&subject, "subject", "", "subject line")
	f.StringVar(&kind, "kind", "", "message, request, reply, status, decision, alert or task (default message)")
	f.StringVarP(&body, "message", "m", "", "the body")
	f.StringVar(&bodyFile, "body-file", "", "read the body from a file (- for standard input)")
	f.StringVar(&thread, "thread", "", "thread id (default: a new thread, or the thread of --reply-to)")
	f.StringVar(&replyTo, "reply-to", "", "id of the message this one answers")
	f.BoolVar(&needsReply, "needs-reply", false, "ask the recipients to reply")
	f.BoolVar(&asJSON, "json", false, "print the id and where the message went as JSON")
	cmd.MarkFlagRequired("to")
	return cmd
}

// readInput reads a file, or standard input for "-", up to limit bytes.
func readInput(cmd *cobra.Command, name string, limit int64) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = cmd.InOrStdin()
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, limit)
	}
	return b, nil
}
