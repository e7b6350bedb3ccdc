package mailstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/agents"
	"github.com/agentmbx/agentmbx/mbx"
)

// Thread returns the messages of a thread, oldest first (id order): the thread of message
// req.ID, or req.ID itself taken as a thread id. With an agent it is that agent's view: the
// message must be its mail, and only its mail in the thread is listed. At most api.MaxThread
// messages (the newest) are returned; Earlier counts the others.
func (s *Store) Thread(ctx context.Context, req api.ThreadRequest) (api.Thread, error) {
	if err := ctx.Err(); err != nil {
		return api.Thread{}, err
	}
	if req.Agent != "" && !mbx.ValidAgentName(req.Agent) {
		return api.Thread{}, fmt.Errorf("host: thread: %w: agent name %q", api.ErrInvalid, req.Agent)
	}
	if !validRef(req.ID) {
		return api.Thread{}, fmt.Errorf("host: thread: %w: message id %q", api.ErrInvalid, req.ID)
	}
	var out api.Thread
	err := s.db.View(func(tx *bbolt.Tx) error {
		thread, err := threadOfRefTx(tx, req.Agent, req.ID)
		if err != nil {
			return err
		}
		out = api.Thread{Thread: thread}
		var ids []string
		p := prefix(thread)
		c := tx.Bucket(bucketThreads).Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			if id := string(k[len(p):]); visibleTx(tx, req.Agent, id) {
				ids = append(ids, id)
			}
		}
		if n := len(ids) - api.MaxThread; n > 0 {
			ids, out.Earlier = ids[n:], n
		}
		out.Messages, err = s.viewsTx(tx, req.Agent, ids)
		return err
	})
	if err != nil {
		return api.Thread{}, fmt.Errorf("host: thread %s: %w", req.ID, err)
	}
	return out, nil
}

// threadOfRefTx finds the thread a request names: the thread of a message the agent may see, or
// a thread id the index knows.
func threadOfRefTx(tx *bbolt.Tx, agent, ref string) (string, error) {
	m, found, err := MessageTx(tx, ref)
	if err != nil {
		return "", err
	}
	if found && visibleTx(tx, agent, ref) {
		return threadOf(&m), nil
	}
	p := prefix(ref)
	c := tx.Bucket(bucketThreads).Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if visibleTx(tx, agent, string(k[len(p):])) {
			return ref, nil
		}
	}
	if agent == "" {
		return "", fmt.Errorf("no message or thread %s on this host: %w", ref, api.ErrNotFound)
	}
	return "", fmt.Errorf("no message or thread %s in the mail of %s: %w", ref, agent, api.ErrNotFound)
}

// ReplyThreadTx is the thread of the message a new one answers: the thread of that message when
// this host has it, else "" (a new thread).
func ReplyThreadTx(tx *bbolt.Tx, replyTo string) (string, error) {
	m, found, err := MessageTx(tx, replyTo)
	if err != nil || !found {
		return "", err
	}
	return threadOf(&m), nil
}

// Reply sends req.Body from agent req.From to the sender of message req.ID, which must be the
// agent's mail, in that message's thread, with reply_to set. A reply to the agent's own message
// goes to that message's recipients. The subject is "Re: " and the original's unless given; the
// kind is reply unless given. It is a Send (Host.Send): durable when it returns.
func (s *Store) Reply(ctx context.Context, req api.ReplyRequest) (api.SendResult, error) {
	if err := checkSender(req.From); err != nil {
		return api.SendResult{}, fmt.Errorf("host: reply: from: %w", err)
	}
	if !mbx.ValidULID(req.ID) {
		return api.SendResult{}, fmt.Errorf("host: reply: %w: message id %q", api.ErrInvalid, req.ID)
	}
	var m Message
	err := s.db.View(func(tx *bbolt.Tx) error {
		var found bool
		var err error
		m, found, err = MessageTx(tx, req.ID)
		if err == nil && (!found || !visibleTx(tx, req.From, req.ID)) {
			err = fmt.Errorf("message %s of %s: %w", req.ID, req.From, api.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return api.SendResult{}, fmt.Errorf("host: reply: %w", err)
	}
	to, err := s.replyRecipients(req.From, &m)
	if err != nil {
		return api.SendResult{}, fmt.Errorf("host: reply to %s: %w", req.ID, err)
	}
	subject := req.Subject
	if strings.TrimSpace(subject) == "" {
		subject = m.Subject
		if !strings.HasPrefix(strings.ToLower(subject), "re:") {
			subject = "Re: " + subject
		}
	}
	kind := req.Kind
	if kind == "" {
		kind = string(mbx.KindReply)
	}
	return s.host.Send(ctx, api.SendRequest{From: req.From, To: to, Subject: subject, Body: req.Body,
		Kind: kind, Thread: threadOf(&m), ReplyTo: m.ID})
}

// replyRecipients is where a reply from agent to m goes: m's sender, or m's recipients when
// the agent sent m itself.
func (s *Store) replyRecipients(agent string, m *Message) ([]string, error) {
	if m.From == agent+"@"+s.name {
		return m.To, nil
	}
	if m.From == AgentMBX || strings.HasPrefix(m.From, AgentMBX+"@") {
		return nil, fmt.Errorf("%w: %q is the host's own alerts; there is no one to reply to", api.ErrReserved, m.From)
	}
	if a, err := mbx.ParseAddress(m.From); err != nil || a.Kind != mbx.AddrAgent {
		return nil, fmt.Errorf("%w: the sender %q is not an agent's address", api.ErrInvalid, m.From)
	}
	return []string{m.From}, nil
}

// checkSender refuses AgentMBX and what is not an agent name (agents.CheckName).
func checkSender(name string) error { return agents.CheckName(name) }

// The store serves the control socket's mail routes.
var _ api.MailService = (*Store)(nil)
