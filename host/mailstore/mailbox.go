package mailstore

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// DeliverTx stores msg (once) and puts a copy in each agent's mailbox in state delivered,
// registering agents on first use (Host.EnsureAgentTx), and counts the delivery of each copy
// (DeliveriesTx). For mail from another host (msg.Origin) it queues the delivered receipt of each
// copy. Agents that already hold the message are skipped (unless the failpoint FailSkipDedup is
// enabled). When tx commits with a new copy in it, Wait and WaitNew wake and MailEvents reports
// each new copy.
func (s *Store) DeliverTx(tx *bbolt.Tx, msg *Message, agents []string, now time.Time) error {
	mb := tx.Bucket(bucketMessages)
	if mb.Get([]byte(msg.ID)) == nil {
		if err := putJSON(mb, []byte(msg.ID), msg); err != nil {
			return err
		}
		if err := indexMessageTx(tx, msg); err != nil {
			return err
		}
		if err := NoteKnownTx(tx, msg.From, msg.Origin); err != nil {
			return err
		}
	}
	box, unread := tx.Bucket(bucketMbox), tx.Bucket(bucketUnread)
	var added []api.MailEvent
	for _, a := range agents {
		k := key(a, msg.ID)
		if box.Get(k) != nil && !SkipDedup() {
			continue
		}
		createdBy := ""
		if msg.Origin != "" {
			createdBy = msg.From
		}
		if err := s.host.EnsureAgentTx(tx, a, now, createdBy); err != nil {
			return err
		}
		e := Copy{State: mbx.ReceiptDelivered, At: mbx.ISOTime(now), Origin: msg.Origin}
		if msg.Origin != "" {
			e.Seq = 1
			if err := s.host.QueueReceiptTx(tx, msg.Origin, msg.ID, a, e, now); err != nil {
				return err
			}
		}
		if err := putJSON(box, k, e); err != nil {
			return err
		}
		if err := unread.Put(k, nil); err != nil {
			return err
		}
		if err := countDeliveryTx(tx, k); err != nil {
			return err
		}
		if err := tx.Bucket(bucketFresh).Put(k, nil); err != nil {
			return err
		}
		if err := putAgentTx(tx, a, msg.ID); err != nil {
			return err
		}
		added = append(added, api.MailEvent{Agent: a, ID: msg.ID, Thread: threadOf(msg), From: msg.From})
	}
	if len(added) > 0 {
		tx.OnCommit(func() {
			s.mail.notify()
			s.events.publish(added)
		})
	}
	return nil
}

// advanceTx moves agent's copy of msgID forward to state (never back). A move of mail from
// another host signs and queues a delivery receipt. It returns the message and entry after the
// move, and whether anything changed.
func (s *Store) advanceTx(tx *bbolt.Tx, agent, msgID string, state mbx.ReceiptState, note string, now time.Time) (Message, Copy, bool, error) {
	var msg Message
	var e Copy
	k := key(agent, msgID)
	box := tx.Bucket(bucketMbox)
	found, err := getJSON(box, k, &e)
	if err != nil {
		return msg, e, false, err
	}
	if !found {
		return msg, e, false, fmt.Errorf("message %s of %s: %w", msgID, agent, api.ErrNotFound)
	}
	if found, err := getJSON(tx.Bucket(bucketMessages), []byte(msgID), &msg); err != nil || !found {
		if err == nil {
			err = fmt.Errorf("%w: mailbox entry without its message %s", api.ErrCorrupt, msgID)
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
		if err := s.host.QueueReceiptTx(tx, e.Origin, msgID, agent, e, now); err != nil {
			return msg, e, false, err
		}
	}
	if err := putJSON(box, k, e); err != nil {
		return msg, e, false, err
	}
	if err := tx.Bucket(bucketFresh).Delete(k); err != nil {
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
func mailboxTx(tx *bbolt.Tx, agent string, all bool) ([]Message, []Copy, error) {
	var msgs []Message
	var ents []Copy
	p := prefix(agent)
	idx := tx.Bucket(bucketUnread)
	if all {
		idx = tx.Bucket(bucketMbox)
	}
	box, mb := tx.Bucket(bucketMbox), tx.Bucket(bucketMessages)
	c := idx.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		id := string(k[len(p):])
		var e Copy
		var m Message
		if found, err := getJSON(box, k, &e); err != nil || !found {
			return nil, nil, fmt.Errorf("%w: mailbox index names a missing entry %s", api.ErrCorrupt, id)
		}
		if found, err := getJSON(mb, []byte(id), &m); err != nil || !found {
			return nil, nil, fmt.Errorf("%w: mailbox entry without its message %s", api.ErrCorrupt, id)
		}
		msgs = append(msgs, m)
		ents = append(ents, e)
	}
	return msgs, ents, nil
}

// listAndNotify returns agent's mail (unread, or all) and moves the copies it shows from
// delivered to notified: the agent has now been told.
func (s *Store) listAndNotify(agent string, all bool) ([]api.Message, error) {
	out := []api.Message{}
	changed := false
	err := s.db.Update(func(tx *bbolt.Tx) error {
		out, changed = out[:0], false
		msgs, ents, err := mailboxTx(tx, agent, all)
		if err != nil {
			return err
		}
		now := s.clock()
		for i := range msgs {
			e := ents[i]
			if e.State == mbx.ReceiptDelivered {
				if _, e, _, err = s.advanceTx(tx, agent, msgs[i].ID, mbx.ReceiptNotified, "", now); err != nil {
					return err
				}
				changed = true
			}
			out = append(out, msgs[i].apiTx(tx, agent, e))
		}
		return nil
	})
	if err == nil && changed {
		s.host.ReceiptsQueued()
	}
	return out, err
}

// Inbox lists an agent's mail: unread by default, everything with all. The copies it shows move
// from delivered to notified.
func (s *Store) Inbox(ctx context.Context, agent string, all bool) ([]api.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !mbx.ValidAgentName(agent) {
		return nil, fmt.Errorf("host: inbox: %w: agent name %q", api.ErrInvalid, agent)
	}
	out, err := s.listAndNotify(agent, all)
	if err != nil {
		return nil, fmt.Errorf("host: inbox of %s: %w", agent, err)
	}
	return out, nil
}

// Read returns one message of an agent's mailbox and marks it read.
func (s *Store) Read(ctx context.Context, req api.ReadRequest) (api.Message, error) {
	return s.mark(ctx, "read", req.Agent, req.ID, mbx.ReceiptRead, "")
}

// Ack marks a message acknowledged by the agent, with an optional note (at most 500 characters).
func (s *Store) Ack(ctx context.Context, req api.AckRequest) (api.Message, error) {
	if len([]rune(req.Note)) > mbx.ReceiptNoteMax {
		return api.Message{}, fmt.Errorf("host: ack: %w: note over %d characters", api.ErrInvalid, mbx.ReceiptNoteMax)
	}
	return s.mark(ctx, "ack", req.Agent, req.ID, mbx.ReceiptAcked, req.Note)
}

func (s *Store) mark(ctx context.Context, op, agent, id string, state mbx.ReceiptState, note string) (api.Message, error) {
	if err := ctx.Err(); err != nil {
		return api.Message{}, err
	}
	if !mbx.ValidAgentName(agent) {
		return api.Message{}, fmt.Errorf("host: %s: %w: agent name %q", op, api.ErrInvalid, agent)
	}
	if !mbx.ValidULID(id) {
		return api.Message{}, fmt.Errorf("host: %s: %w: message id %q", op, api.ErrInvalid, id)
	}
	var out api.Message
	changed := false
	err := s.db.Update(func(tx *bbolt.Tx) error {
		msg, e, ch, err := s.advanceTx(tx, agent, id, state, note, s.clock())
		out, changed = msg.apiTx(tx, agent, e), ch
		return err
	})
	if err != nil {
		return api.Message{}, fmt.Errorf("host: %s %s: %w", op, id, err)
	}
	if changed {
		s.host.ReceiptsQueued()
	}
	return out, nil
}

// Wait blocks until agent has unread mail, the timeout passes or ctx ends, and returns the unread
// mail (empty on timeout). The copies it returns move from delivered to notified.
func (s *Store) Wait(ctx context.Context, agent string, timeout time.Duration) ([]api.Message, error) {
	if !mbx.ValidAgentName(agent) {
		return nil, fmt.Errorf("host: wait: %w: agent name %q", api.ErrInvalid, agent)
	}
	if timeout < 0 {
		timeout = 0
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		ch, closed := s.mail.wait()
		if closed {
			return nil, fmt.Errorf("host: wait: %w", api.ErrClosed)
		}
		var n int
		err := s.db.View(func(tx *bbolt.Tx) error {
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
			out, err := s.listAndNotify(agent, false)
			if err != nil {
				return nil, fmt.Errorf("host: wait: %w", err)
			}
			return out, nil
		}
		if woken, err := s.mail.park(ctx, timer.C, ch); err != nil {
			return nil, err
		} else if !woken {
			return []api.Message{}, nil
		}
	}
}

// Waiters is how many Wait and WaitNew calls are parked now, waiting for mail to arrive (a test
// that delivers mail to wake a wait waits for it to be parked first).
func (s *Store) Waiters() int { return s.mail.waiters() }

// ResendReceiptsTx queues again the current delivery receipt of each given agent's copy of
// message id from host origin, unless onTheWay reports that the copy's last receipt (its seq) is
// still being sent. Each re-send takes the next seq, so the sender accepts it. It returns how
// many it queued.
func (s *Store) ResendReceiptsTx(tx *bbolt.Tx, id, origin string, agents []string, onTheWay func(agent string, seq int64) (bool, error)) (int, error) {
	box, now := tx.Bucket(bucketMbox), s.clock()
	n := 0
	for _, a := range agents {
		e, found, err := CopyTx(tx, a, id)
		if err != nil {
			return n, err
		}
		if !found || e.Origin != origin {
			continue
		}
		busy, err := onTheWay(a, e.Seq)
		if err != nil {
			return n, err
		}
		if busy {
			continue
		}
		e.Seq++
		if err := s.host.QueueReceiptTx(tx, origin, id, a, e, now); err != nil {
			return n, err
		}
		if err := putJSON(box, key(a, id), e); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
