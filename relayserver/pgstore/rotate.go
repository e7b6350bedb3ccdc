package pgstore

import (
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// Rotate implements relayserver.Tx (its rules are on relayserver.Tx.Rotate). It holds both keys'
// queue locks, taken in key order, for the rest of the transaction.
func (t *tx) Rotate(r relayserver.Rotation) (relayserver.RotateResult, error) {
	var res relayserver.RotateResult
	keys := []string{queueLock(r.OldPubkey), queueLock(r.NewPubkey)}
	sort.Strings(keys)
	if err := t.lock(keys...); err != nil {
		return res, fmt.Errorf("rotate: lock: %w", err)
	}
	nw, retried, err := relayserver.PlanRotation(t, r)
	if err != nil || retried {
		return res, err
	}
	// Revoke the old key first so the new one can take its name inside the account.
	if _, err := t.q.Exec(t.ctx, "UPDATE enrolments SET revoked_at = $1 WHERE host_pubkey = $2",
		storekit.MS(r.At), r.OldPubkey); err != nil {
		return res, fmt.Errorf("rotate: revoke: %w", err)
	}
	if err := t.PutEnrolment(nw); err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}
	if res.MovedItems, err = t.moveQueue(r); err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}
	if err := t.moveRest(r); err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}
	t.notify = append(t.notify, r.NewPubkey, r.OldPubkey)
	return res, nil
}

// moveQueue re-sequences the old key's queue after the new key's head, in order, dropping items
// the new key already holds. Each moved item's dedup row is copied to the new key with its new
// seq; the old key's row stays.
func (t *tx) moveQueue(r relayserver.Rotation) (int64, error) {
	type row struct {
		seq            int64
		sender, itemID string
	}
	rows, err := t.q.Query(t.ctx, `SELECT seq, sender_pubkey, item_id FROM items
WHERE target_pubkey = $1 ORDER BY seq`, r.OldPubkey)
	if err != nil {
		return 0, fmt.Errorf("queue: %w", err)
	}
	queue, err := pgx.CollectRows(rows, func(rw pgx.CollectableRow) (row, error) {
		var x row
		return x, rw.Scan(&x.seq, &x.sender, &x.itemID)
	})
	if err != nil {
		return 0, fmt.Errorf("queue: %w", err)
	}
	var moved int64
	for _, x := range queue {
		var seq *int64
		// One statement per item: a repeat is deleted; anything else gets the next seq of the new
		// key (counter row locked FOR UPDATE), moves, and has its dedup row copied.
		err := t.q.QueryRow(t.ctx, `WITH rep AS (
	SELECT 1 FROM dedup WHERE sender_pubkey = $3 AND item_id = $4 AND target_pubkey = $2
), gone AS (
	DELETE FROM items WHERE target_pubkey = $1 AND seq = $5 AND EXISTS(SELECT 1 FROM rep)
), cur AS (
	SELECT GREATEST(COALESCE((SELECT next_seq FROM seqs WHERE target_pubkey = $2 FOR UPDATE), 0), $6::bigint, 1) AS seq
	WHERE NOT EXISTS(SELECT 1 FROM rep)
), s AS (
	INSERT INTO seqs(target_pubkey, next_seq) SELECT $2, seq + 1 FROM cur
	ON CONFLICT(target_pubkey) DO UPDATE SET next_seq = excluded.next_seq
), mv AS (
	UPDATE items SET target_pubkey = $2, seq = cur.seq FROM cur WHERE target_pubkey = $1 AND items.seq = $5
), dd AS (
	INSERT INTO dedup(sender_pubkey, item_id, target_pubkey, wire_hash, seq, accepted_at)
	SELECT sender_pubkey, item_id, $2, wire_hash, cur.seq, accepted_at FROM dedup, cur
	WHERE sender_pubkey = $3 AND item_id = $4 AND target_pubkey = $1
)
SELECT (SELECT seq FROM cur)`, r.OldPubkey, r.NewPubkey, x.sender, x.itemID, x.seq, storekit.MS(r.At)).Scan(&seq)
		if err != nil {
			return 0, fmt.Errorf("move item: %w", err)
		}
		if seq != nil {
			moved++
		}
	}
	return moved, nil
}

// moveRest moves the allowlist, the dedup rows and the allowlist memberships, recounts both
// queues and drops the old key's enc ad.
func (t *tx) moveRest(r relayserver.Rotation) error {
	_, err := t.SenderList(r.NewPubkey)
	switch {
	case errors.Is(err, relayserver.ErrNotFound):
		b := &pgx.Batch{}
		b.Queue("UPDATE sender_lists SET target_pubkey = $1 WHERE target_pubkey = $2", r.NewPubkey, r.OldPubkey)
		b.Queue("UPDATE sender_list_members SET target_pubkey = $1 WHERE target_pubkey = $2", r.NewPubkey, r.OldPubkey)
		if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
			return fmt.Errorf("move sender list: %w", err)
		}
	case err != nil:
		return err
	}
	nwK, oldK := r.NewPubkey, r.OldPubkey
	b := &pgx.Batch{}
	b.Queue("DELETE FROM sender_lists WHERE target_pubkey = $1", oldK)
	b.Queue("DELETE FROM sender_list_members WHERE target_pubkey = $1", oldK)
	// Copies for the new key of the old key's dedup rows; rows the new key has win.
	b.Queue(`INSERT INTO dedup(sender_pubkey, item_id, target_pubkey, wire_hash, seq, accepted_at)
SELECT sender_pubkey, item_id, $1, wire_hash, seq, accepted_at FROM dedup WHERE target_pubkey = $2
ON CONFLICT DO NOTHING`, nwK, oldK)
	// The rotated host's rows as a sender follow it; where the new key has the row, it wins.
	b.Queue(`UPDATE dedup d SET sender_pubkey = $1 WHERE d.sender_pubkey = $2 AND NOT EXISTS(
	SELECT 1 FROM dedup n WHERE n.sender_pubkey = $1 AND n.item_id = d.item_id AND n.target_pubkey = d.target_pubkey)`,
		nwK, oldK)
	b.Queue("DELETE FROM dedup WHERE sender_pubkey = $1", oldK)
	// Usage of both queues, recounted.
	b.Queue("DELETE FROM usage WHERE target_pubkey IN ($1, $2)", nwK, oldK)
	b.Queue(`INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
SELECT target_pubkey, sender_pubkey, count(*), sum(bytes) FROM items WHERE target_pubkey = $1 GROUP BY 1, 2`, nwK)
	b.Queue(`INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
SELECT target_pubkey, '', count(*), sum(bytes) FROM items WHERE target_pubkey = $1 GROUP BY 1`, nwK)
	// Other targets that accepted the old key accept the new one.
	b.Queue(`INSERT INTO sender_list_members(target_pubkey, sender_pubkey)
SELECT target_pubkey, $1 FROM sender_list_members WHERE sender_pubkey = $2 ON CONFLICT DO NOTHING`, nwK, oldK)
	b.Queue("DELETE FROM sender_list_members WHERE sender_pubkey = $1", oldK)
	// The old key's enc ad names a key that no longer speaks for the host.
	b.Queue("DELETE FROM enc_ads WHERE host_pubkey = $1", oldK)
	// The dedup rows charged to senders changed (rows for the old key copied to the new one, the
	// old key's own rows moved to it): those senders' counters, recounted.
	b.Queue(`WITH s AS (SELECT DISTINCT sender_pubkey AS k FROM dedup WHERE target_pubkey IN ($1, $2)
	UNION SELECT $1::text UNION SELECT $2::text)
DELETE FROM usage WHERE target_pubkey = '' AND sender_pubkey IN (SELECT k FROM s)`, nwK, oldK)
	b.Queue(`INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
SELECT '', sender_pubkey, count(*), 0 FROM dedup WHERE sender_pubkey IN (
	SELECT sender_pubkey FROM dedup WHERE target_pubkey IN ($1, $2) UNION SELECT $1::text UNION SELECT $2::text)
GROUP BY sender_pubkey`, nwK, oldK)
	if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
		return err
	}
	return nil
}
