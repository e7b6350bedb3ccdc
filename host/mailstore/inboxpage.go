package mailstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// InboxPage lists the newest req.Limit messages of an agent's mail (unread, or all) whose ids
// follow req.Since, oldest first; More counts the older ones it left out. The copies it shows
// move from delivered to notified, unless req.Peek.
func (s *Store) InboxPage(ctx context.Context, req api.InboxRequest) (api.InboxPage, error) {
	if err := ctx.Err(); err != nil {
		return api.InboxPage{}, err
	}
	limit, err := checkPage(req.Agent, req.Limit)
	if err == nil && req.Since != "" && !validRef(req.Since) {
		err = fmt.Errorf("%w: since %q is not a message id", api.ErrInvalid, req.Since)
	}
	if err != nil {
		return api.InboxPage{}, fmt.Errorf("host: inbox: %w", err)
	}
	idx := bucketUnread
	if req.All {
		idx = bucketMbox
	}
	pick := func(tx *bbolt.Tx) ([]string, int) { return lastAfter(tx.Bucket(idx), req.Agent, req.Since, limit) }
	var page api.InboxPage
	if req.Peek {
		page, err = s.peekPage(req.Agent, pick)
	} else {
		page, err = s.showPage(req.Agent, pick)
	}
	if err != nil {
		return api.InboxPage{}, fmt.Errorf("host: inbox of %s: %w", req.Agent, err)
	}
	return page, nil
}

// WaitNew blocks until the agent has new mail (copies in state delivered), the timeout passes or
// ctx ends. It returns the oldest req.Limit new messages, oldest first, and how many new ones it
// left out; the ones it returns move to notified, so each new message is returned once. At the
// timeout the page is empty.
func (s *Store) WaitNew(ctx context.Context, req api.WaitRequest) (api.InboxPage, error) {
	limit, err := checkPage(req.Agent, req.Limit)
	if err == nil && (req.Timeout < 0 || req.Timeout > api.MaxWait) {
		err = fmt.Errorf("%w: timeout %s (0s to %s)", api.ErrInvalid, req.Timeout, api.MaxWait)
	}
	if err != nil {
		return api.InboxPage{}, fmt.Errorf("host: wait: %w", err)
	}
	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	for {
		ch, closed := s.mail.wait()
		if closed {
			return api.InboxPage{}, fmt.Errorf("host: wait: %w", api.ErrClosed)
		}
		var fresh bool
		if err := s.db.View(func(tx *bbolt.Tx) error {
			k, _ := tx.Bucket(bucketFresh).Cursor().Seek(prefix(req.Agent))
			fresh = k != nil && bytes.HasPrefix(k, prefix(req.Agent))
			return nil
		}); err != nil {
			return api.InboxPage{}, fmt.Errorf("host: wait: %w", err)
		}
		if fresh {
			page, err := s.showPage(req.Agent, func(tx *bbolt.Tx) ([]string, int) {
				ids := idsAfter(tx.Bucket(bucketFresh), req.Agent, "")
				if len(ids) > limit {
					return ids[:limit], len(ids) - limit
				}
				return ids, 0
			})
			if err != nil || len(page.Messages) > 0 {
				return page, err
			}
		}
		if woken, err := s.mail.park(ctx, timer.C, ch); err != nil {
			return api.InboxPage{}, err
		} else if !woken {
			return api.InboxPage{Messages: []api.Message{}}, nil
		}
	}
}

// checkPage validates an agent name and a page size (0 is api.DefaultPage).
func checkPage(agent string, limit int) (int, error) {
	if !mbx.ValidAgentName(agent) {
		return 0, fmt.Errorf("%w: agent name %q", api.ErrInvalid, agent)
	}
	return api.PageSize(limit)
}

// lastAfter returns the last limit ids of agent's keys in an agent ‖ id bucket that sort after
// since ("" for all), in order, and how many before them it left out. It walks from the end, so
// the ids it leaves out are counted, not copied.
func lastAfter(b *bbolt.Bucket, agent, since string, limit int) ([]string, int) {
	p := prefix(agent)
	c := b.Cursor()
	k, _ := c.Seek(append(bytes.Clone(p), 0xff))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	var ids []string
	more := 0
	for ; k != nil && bytes.HasPrefix(k, p); k, _ = c.Prev() {
		id := string(k[len(p):])
		if since != "" && id <= since {
			break
		}
		if len(ids) < limit {
			ids = append(ids, id)
		} else {
			more++
		}
	}
	slices.Reverse(ids)
	return ids, more
}

// idsAfter lists the ids of agent's keys in an agent ‖ id bucket that sort after since ("" for
// all), in order.
func idsAfter(b *bbolt.Bucket, agent, since string) []string {
	var ids []string
	p := prefix(agent)
	c := b.Cursor()
	k, _ := c.Seek(key(agent, since))
	for ; k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if id := string(k[len(p):]); id != since {
			ids = append(ids, id)
		}
	}
	return ids
}

// peekPage picks a page of agent's copies and returns them as they are, changing nothing.
func (s *Store) peekPage(agent string, pick func(tx *bbolt.Tx) ([]string, int)) (api.InboxPage, error) {
	var page api.InboxPage
	err := s.db.View(func(tx *bbolt.Tx) error {
		ids, more := pick(tx)
		page = api.InboxPage{Messages: make([]api.Message, 0, len(ids)), More: more}
		for _, id := range ids {
			c, found, err := CopyTx(tx, agent, id)
			if err == nil && !found {
				err = fmt.Errorf("%w: mailbox index names a missing entry %s", api.ErrCorrupt, id)
			}
			if err != nil {
				return err
			}
			m, found, err := MessageTx(tx, id)
			if err == nil && !found {
				err = fmt.Errorf("%w: mailbox entry without its message %s", api.ErrCorrupt, id)
			}
			if err != nil {
				return err
			}
			page.Messages = append(page.Messages, m.apiTx(tx, agent, c))
		}
		return nil
	})
	return page, err
}

// showPage picks a page of agent's copies in one transaction (pick returns their ids and how
// many it left out), moves the delivered ones to notified and returns them.
func (s *Store) showPage(agent string, pick func(tx *bbolt.Tx) ([]string, int)) (api.InboxPage, error) {
	var page api.InboxPage
	changed := false
	err := s.db.Update(func(tx *bbolt.Tx) error {
		ids, more := pick(tx)
		page, changed = api.InboxPage{Messages: make([]api.Message, 0, len(ids)), More: more}, false
		now := s.clock()
		for _, id := range ids {
			msg, e, ch, err := s.advanceTx(tx, agent, id, mbx.ReceiptNotified, "", now)
			if err != nil {
				return err
			}
			changed = changed || ch
			page.Messages = append(page.Messages, msg.apiTx(tx, agent, e))
		}
		return nil
	})
	if err == nil && changed {
		s.host.ReceiptsQueued()
	}
	return page, err
}
