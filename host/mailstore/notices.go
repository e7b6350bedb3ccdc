package mailstore

import (
	"bytes"
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
)

var _ api.NoticeService = (*Store)(nil)

// Notices announces the agent's new mail that no notice has announced yet: the copies in state
// delivered (not shown by a listing, not read) without a noticed mark. It marks them and returns
// the newest req.Limit of them, oldest first, with More counting the others it announced by
// count only. Marks of copies that have left state delivered are forgotten in the same
// transaction: a copy never returns to it, so it is never announced again. Ids are not an
// arrival order (mail queued at its sender arrives late with an old id), which is why each copy
// is marked rather than a high-water id kept.
func (s *Store) Notices(ctx context.Context, req api.NoticeRequest) (api.InboxPage, error) {
	if err := ctx.Err(); err != nil {
		return api.InboxPage{}, err
	}
	limit, err := checkPage(req.Agent, req.Limit)
	if err != nil {
		return api.InboxPage{}, fmt.Errorf("host: notices: %w", err)
	}
	var page api.InboxPage
	err = s.db.Update(func(tx *bbolt.Tx) error {
		fresh, noticed := tx.Bucket(bucketFresh), tx.Bucket(bucketNoticed)
		p := prefix(req.Agent)
		var stale [][]byte
		c := noticed.Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			if fresh.Get(k) == nil {
				stale = append(stale, bytes.Clone(k))
			}
		}
		for _, k := range stale {
			if err := noticed.Delete(k); err != nil {
				return err
			}
		}
		var ids []string
		c = fresh.Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			if noticed.Get(k) == nil {
				ids = append(ids, string(k[len(p):]))
			}
		}
		for _, id := range ids {
			if err := noticed.Put(key(req.Agent, id), nil); err != nil {
				return err
			}
		}
		if len(ids) > limit {
			page.More, ids = len(ids)-limit, ids[len(ids)-limit:]
		}
		page.Messages = make([]api.Message, 0, len(ids))
		for _, id := range ids {
			cp, found, err := CopyTx(tx, req.Agent, id)
			if err == nil && !found {
				err = fmt.Errorf("%w: fresh index names a missing entry %s", api.ErrCorrupt, id)
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
			page.Messages = append(page.Messages, m.apiTx(tx, req.Agent, cp))
		}
		return nil
	})
	if err != nil {
		return api.InboxPage{}, fmt.Errorf("host: notices of %s: %w", req.Agent, err)
	}
	return page, nil
}
