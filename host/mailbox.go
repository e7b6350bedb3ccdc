package host

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailindex"
	"github.com/agentmbx/agentmbx/mbx"
)

// storedMessage is a messages bucket value: the plaintext of a message some local agent holds
// (mail from another host after opening, mail sent on this host, and the host's own alerts).
type storedMessage struct {
	ID         string   `json:"id"`
	TS         string   `json:"ts"`
	From       string   `json:"from"`
	To         []string `json:"to"`
	Subject    string   `json:"subject"`
	Body       string   `json:"body"`
	Kind       string   `json:"kind"`
	Thread     string   `json:"thread,omitempty"`
	ReplyTo    string   `json:"reply_to,omitempty"`
	Refs       []string `json:"refs,omitempty"`
	NeedsReply bool     `json:"needs_reply,omitempty"`
	// Origin is the peer host the message came from; "" for mail that started on this host.
	Origin string `json:"origin,omitempty"`
}

// mboxEntry is a mbox bucket value: one local recipient's copy of a message and its state.
type mboxEntry struct {
	State mbx.ReceiptState `json:"state"`
	At    string           `json:"at"`
	Note  string           `json:"note,omitempty"`
	// Seq is the seq of the last delivery receipt this host signed for the copy (mail from
	// another host only; 0 otherwise).
	Seq    int64  `json:"seq,omitempty"`
	Origin string `json:"origin,omitempty"`
}

func (m *storedMessage) api(agent string, e mboxEntry) api.Message {
	return api.Message{
		ID: m.ID, From: m.From, To: m.To, Subject: m.Subject, Body: m.Body, Kind: m.Kind, TS: m.TS,
		Thread: m.Thread, ReplyTo: m.ReplyTo, NeedsReply: m.NeedsReply,
		Agent: agent, State: e.State.String(), Note: e.Note,
	}
}

// deliverLocalTx stores msg (once) and puts a copy in each agent's mailbox in state delivered,
// registering agents on first use. For mail from another host it queues the delivered receipt of
// each copy. Agents that already hold the message are skipped.
func (h *Host) deliverLocalTx(tx *bbolt.Tx, msg *storedMessage, agents []string, now time.Time) error {
	mb := tx.Bucket(bucketMessages)
	if mb.Get([]byte(msg.ID)) == nil {
		if err := putJSON(mb, []byte(msg.ID), msg); err != nil {
			return err
		}
		if err := indexMessageTx(tx, msg); err != nil {
			return err
		}
		if err := mailindex.NoteKnownTx(tx, msg.From, msg.Origin); err != nil {
			return err
		}
	}
	box, unread := tx.Bucket(bucketMbox), tx.Bucket(bucketUnread)
	for _, a := range agents {
		k := key2(a, msg.ID)
		if box.Get(k) != nil {
			continue
		}
		createdBy := ""
		if msg.Origin != "" {
			createdBy = msg.From
		}
		if err := ensureAgentTx(tx, a, now, createdBy); err != nil {
			return err
		}
		e := mboxEntry{State: mbx.ReceiptDelivered, At: mbx.ISOTime(now), Origin: msg.Origin}
		if msg.Origin != "" {
			e.Seq = 1
			if err := h.queueReceiptTx(tx, msg.Origin, msg.ID, a, e, now); err != nil {
				return err
			}
		}
		if err := putJSON(box, k, e); err != nil {
			return err
		}
		if err := unread.Put(k, nil); err != nil {
			return err
		}
		if err := tx.Bucket(mailindex.Fresh).Put(k, nil); err != nil {
			return err
		}
		if err := mailindex.PutAgentTx(tx, a, msg.ID); err != nil {
			return err
		}
	}
	return nil
}

// advanceTx moves agent's copy of msgID forward to state (never back). A move of mail from
// another host signs and queues a delivery receipt. It returns the message and entry after the
// move, and whether anything changed.
func (h *Host) advanceTx(tx *bbolt.Tx, agent, msgID string, state mbx.ReceiptState, note string, now time.Time) (storedMessage, mboxEntry, bool, error) {
	var msg storedMessage
	var e mboxEntry
	k := key2(agent, msgID)
	box := tx.Bucket(bucketMbox)
	found, err := getJSON(box, k, &e)
	if err != nil {
		return msg, e, false, err
	}
	if !found {
		return msg, e, false, fmt.Errorf("message %s of %s: %w", msgID, agent, ErrNotFound)
	}
	if found, err := getJSON(tx.Bucket(bucketMessages), []byte(msgID), &msg); err != nil || !found {
		if err == nil {
			err = fmt.Errorf("%w: mailbox entry without its message %s", ErrCorrupt, msgID)
		}
		return msg, e, false, err
	}
	if state <= e.State && !(state == mbx.ReceiptAcked && e.State == mbx.ReceiptAcked && note != "" && note != e.Note) {
		return msg, e, false, nil
	}
	e.State, e.At = state, mbx.ISOTime(now)
	if note != "" {
		e.Note = note
	}
	if e.Origin != "" {
		e.Seq++
		if err := h.queueReceiptTx(tx, e.Origin, msgID, agent, e, now); err != nil {
			return msg, e, false, err
		}
	}
	if err := putJSON(box, k, e); err != nil {
		return msg, e, false, err
	}
	if err := tx.Bucket(mailindex.Fresh).Delete(k); err != nil {
		return msg, e, false, err
	}
	if state >= mbx.ReceiptRead {
		if err := tx.Bucket(bucketUnread).Delete(k); err != nil {
			return msg, e, false, err
		}
	}
	return msg, e, true, nil
}

// mailboxTx lists agent's copies: the unread ones (delivered, notified), or all.
func mailboxTx(tx *bbolt.Tx, agent string, all bool) ([]storedMessage, []mboxEntry, error) {
	var msgs []storedMessage
	var ents []mboxEntry
	p := prefix(agent)
	idx := tx.Bucket(bucketUnread)
	if all {
		idx = tx.Bucket(bucketMbox)
	}
	box, mb := tx.Bucket(bucketMbox), tx.Bucket(bucketMessages)
	c := idx.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		id := string(k[len(p):])
		var e mboxEntry
		var m storedMessage
		if found, err := getJSON(box, k, &e); err != nil || !found {
			return nil, nil, fmt.Errorf("%w: mailbox index names a missing entry %s", ErrCorrupt, id)
		}
		if found, err := getJSON(mb, []byte(id), &m); err != nil || !found {
			return nil, nil, fmt.Errorf("%w: mailbox entry without its message %s", ErrCorrupt, id)
		}
		msgs = append(msgs, m)
		ents = append(ents, e)
	}
	return msgs, ents, nil
}

// listAndNotify returns agent's mail (unread, or all) and moves the copies it shows from
// delivered to notified: the agent has now been told.
func (h *Host) listAndNotify(agent string, all bool) ([]api.Message, error) {
	out := []api.Message{}
	changed := false
	err := h.db.Update(func(tx *bbolt.Tx) error {
		out, changed = out[:0], false
		msgs, ents, err := mailboxTx(tx, agent, all)
		if err != nil {
			return err
		}
		now := h.clock()
		for i := range msgs {
			e := ents[i]
			if e.State == mbx.ReceiptDelivered {
				if _, e, _, err = h.advanceTx(tx, agent, msgs[i].ID, mbx.ReceiptNotified, "", now); err != nil {
					return err
				}
				changed = true
			}
			out = append(out, msgs[i].api(agent, e))
		}
		return nil
	})
	if err == nil && changed {
		h.kickOutbox() // receipts may be queued
	}
	return out, err
}

// Inbox lists an agent's mail: unread by default, everything with all. The copies it shows move
// from delivered to notified.
func (h *Host) Inbox(ctx context.Context, agent string, all bool) ([]api.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !ValidAgentName(agent) {
		return nil, fmt.Errorf("host: inbox: %w: agent name %q", ErrInvalid, agent)
	}
	out, err := h.listAndNotify(agent, all)
	if err != nil {
		return nil, fmt.Errorf("host: inbox of %s: %w", agent, err)
	}
	return out, nil
}

// Read returns one message of an agent's mailbox and marks it read.
func (h *Host) Read(ctx context.Context, req api.ReadRequest) (api.Message, error) {
	return h.mark(ctx, "read", req.Agent, req.ID, mbx.ReceiptRead, "")
}

// Ack marks a message acknowledged by the agent, with an optional note (at most 500 characters).
func (h *Host) Ack(ctx context.Context, req api.AckRequest) (api.Message, error) {
	if len([]rune(req.Note)) > mbx.ReceiptNoteMax {
		return api.Message{}, fmt.Errorf("host: ack: %w: note over %d characters", ErrInvalid, mbx.ReceiptNoteMax)
	}
	return h.mark(ctx, "ack", req.Agent, req.ID, mbx.ReceiptAcked, req.Note)
}

func (h *Host) mark(ctx context.Context, op, agent, id string, state mbx.ReceiptState, note string) (api.Message, error) {
	if err := ctx.Err(); err != nil {
		return api.Message{}, err
	}
	if !ValidAgentName(agent) {
		return api.Message{}, fmt.Errorf("host: %s: %w: agent name %q", op, ErrInvalid, agent)
	}
	if !mbx.ValidULID(id) {
		return api.Message{}, fmt.Errorf("host: %s: %w: message id %q", op, ErrInvalid, id)
	}
	var out api.Message
	changed := false
	err := h.db.Update(func(tx *bbolt.Tx) error {
		msg, e, ch, err := h.advanceTx(tx, agent, id, state, note, h.clock())
		out, changed = msg.api(agent, e), ch
		return err
	})
	if err != nil {
		return api.Message{}, fmt.Errorf("host: %s %s: %w", op, id, err)
	}
	if changed {
		h.kickOutbox() // a receipt may be queued
	}
	return out, nil
}

// Wait blocks until agent has unread mail, the timeout passes or ctx ends, and returns the unread
// mail (empty on timeout). The copies it returns move from delivered to notified.
func (h *Host) Wait(ctx context.Context, agent string, timeout time.Duration) ([]api.Message, error) {
	if !ValidAgentName(agent) {
		return nil, fmt.Errorf("host: wait: %w: agent name %q", ErrInvalid, agent)
	}
	if timeout < 0 {
		timeout = 0
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		ch, closed := h.mail.wait()
		if closed {
			return nil, fmt.Errorf("host: wait: %w", ErrClosed)
		}
		var n int
		err := h.db.View(func(tx *bbolt.Tx) error {
			p := prefix(agent)
			k, _ := tx.Bucket(bucketUnread).Cursor().Seek(p)
			if k != nil && bytes.HasPrefix(k, p) {
				n = 1
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("host: wait: %w", err)
		}
		if n > 0 {
			out, err := h.listAndNotify(agent, false)
			if err != nil {
				return nil, fmt.Errorf("host: wait: %w", err)
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return []api.Message{}, nil
		case <-ch:
		}
	}
}
