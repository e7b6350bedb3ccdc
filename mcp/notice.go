package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentmbx/agentmbx/api"
)

// A notice is a short text about new mail for an agent runtime's hook (`agentmbx notify`): how
// many messages, each one's sender and subject (fenced as other agents' words, like the tools'
// texts) and how to read them.

// NoticeText is the notice of the new mail p (from api.NoticeService) for agent, "" when there
// is none. h (may be nil) supplies the senders' host keys for mail stored before they were
// recorded.
func NoticeText(ctx context.Context, h Host, agent string, p api.InboxPage) (string, error) {
	if len(p.Messages) == 0 && p.More == 0 {
		return "", nil
	}
	ss := &senders{h: h}
	items := make([]Item, 0, len(p.Messages))
	for _, m := range p.Messages {
		items = append(items, itemOf(m, ss.of(ctx, m)))
	}
	txt, _, err := fenced(func(nonce string) (string, int) {
		var b strings.Builder
		fmt.Fprintf(&b, "AgentMBX: %s for %s", count(len(items)+p.More, "new message"), agent)
		if p.More > 0 {
			fmt.Fprintf(&b, " (the newest %d listed)", len(items))
		}
		b.WriteString(":\n")
		for _, m := range items {
			fmt.Fprintf(&b, "- %s\n%s\nsubject: %s\n%s\n", m.ID, fenceOpen(nonce, m.From, m.Sender), line(m.Subject), fenceClose(nonce))
		}
		fmt.Fprintf(&b, "Read them with the mbx_inbox and mbx_read tools, or `agentmbx inbox --as %s`.%s", agent, fencedNote)
		return b.String(), len(items)
	})
	return txt, err
}

// NoticeLine is the notice on one line, for a desktop notifier: the count and the senders.
func NoticeLine(agent string, p api.InboxPage) string {
	if len(p.Messages) == 0 && p.More == 0 {
		return ""
	}
	var from []string
	for _, m := range p.Messages {
		if a := line(m.From); !slices.Contains(from, a) {
			from = append(from, a)
		}
	}
	s := fmt.Sprintf("AgentMBX: %s for %s from %s", count(len(p.Messages)+p.More, "new message"), agent, strings.Join(from, ", "))
	if p.More > 0 {
		s += " and others"
	}
	return s
}
