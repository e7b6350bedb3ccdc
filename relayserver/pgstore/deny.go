package pgstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// DenyList implements relayserver.Store.
func (s *Store) DenyList(ctx context.Context) ([]relayserver.DenyEntry, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+storekit.DenyCols+" FROM deny ORDER BY added_at, kind, value")
	if err != nil {
		return nil, fmt.Errorf("pgstore: deny list: %w", err)
	}
	defer rows.Close()
	out, err := storekit.ScanDenyEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: deny list: %w", err)
	}
	return out, nil
}

// UpdateDeny implements relayserver.DenyStore through Update: every replica may write it.
func (s *Store) UpdateDeny(ctx context.Context, fn func(relayserver.DenyWriter) error) error {
	return s.Update(ctx, func(tx relayserver.Tx) error { return fn(tx) })
}

func (t *tx) PutDeny(d relayserver.DenyEntry) error {
	if _, err := t.q.Exec(t.ctx, "DELETE FROM deny WHERE until <> 0 AND until <= $1", storekit.MS(d.AddedAt)); err != nil {
		return fmt.Errorf("put deny: %w", err)
	}
	_, err := t.q.Exec(t.ctx, `
INSERT INTO deny(kind, value, added_at, until, note) VALUES($1, $2, $3, $4, $5)
ON CONFLICT(kind, value) DO UPDATE SET added_at = excluded.added_at, until = excluded.until, note = excluded.note`,
		string(d.Kind), d.Value, storekit.MS(d.AddedAt), storekit.MS(d.Until), d.Note)
	if err != nil {
		return fmt.Errorf("put deny: %w", err)
	}
	return nil
}

func (t *tx) DeleteDeny(kind relayserver.DenyKind, value string) (bool, error) {
	tag, err := t.q.Exec(t.ctx, "DELETE FROM deny WHERE kind = $1 AND value = $2", string(kind), value)
	if err != nil {
		return false, fmt.Errorf("delete deny: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// DenyRevoke implements relayserver.Tx (storekit.DenyCandidates: a fingerprint entry reads the
// keys of all live enrolments; a rare operator action, at most MaxEnrolments).
func (t *tx) DenyRevoke(d relayserver.DenyEntry, at time.Time) ([]string, error) {
	query, args, ok := storekit.DenyCandidates(d, "$1")
	if !ok {
		return nil, nil
	}
	rows, err := t.q.Query(t.ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("deny revoke: %w", err)
	}
	keys, err := storekit.DeniedKeys(rows, d)
	rows.Close()
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	if _, err := t.q.Exec(t.ctx, "UPDATE enrolments SET denied_at = $1 WHERE host_pubkey = ANY($2) AND denied_at IS NULL",
		storekit.MS(at), keys); err != nil {
		return nil, fmt.Errorf("deny revoke: %w", err)
	}
	return keys, nil
}

func (t *tx) MarkReclaim(kind relayserver.DenyKind, value string, at time.Time) (bool, error) {
	tag, err := t.q.Exec(t.ctx, "UPDATE deny SET reclaim_at = $1 WHERE kind = $2 AND value = $3", storekit.MS(at), string(kind), value)
	if err != nil {
		return false, fmt.Errorf("mark reclaim: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// TakeReclaim implements relayserver.Tx: the row's lock makes a second replica's update wait and
// then find the reclaim done.
func (t *tx) TakeReclaim(kind relayserver.DenyKind, value string, at time.Time) (bool, error) {
	tag, err := t.q.Exec(t.ctx, `UPDATE deny SET reclaimed_at = GREATEST($1, reclaim_at)
WHERE kind = $2 AND value = $3 AND reclaim_at > reclaimed_at`, storekit.MS(at), string(kind), value)
	if err != nil {
		return false, fmt.Errorf("take reclaim: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ReclaimDone implements relayserver.Tx.
func (t *tx) ReclaimDone(kind relayserver.DenyKind, value string, r relayserver.ReclaimResult) error {
	if _, err := t.q.Exec(t.ctx, "UPDATE deny SET reclaimed = $1 WHERE kind = $2 AND value = $3",
		storekit.ReclaimJSON(r), string(kind), value); err != nil {
		return fmt.Errorf("reclaim done: %w", err)
	}
	return nil
}

// DeniedKeys implements relayserver.Tx.
func (t *tx) DeniedKeys(d relayserver.DenyEntry) ([]string, error) {
	query, args, ok := storekit.DeniedCandidates(d, "$1")
	if !ok {
		return nil, nil
	}
	rows, err := t.q.Query(t.ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("denied keys: %w", err)
	}
	defer rows.Close()
	keys, err := storekit.DeniedKeys(rows, d)
	if err != nil {
		return nil, fmt.Errorf("denied keys: %w", err)
	}
	return keys, nil
}

// Reclaim implements relayserver.Tx, under the queue locks of the key and of every target it
// has items queued for, and its sender lock.
func (t *tx) Reclaim(pubkey string) (relayserver.ReclaimResult, error) {
	var res relayserver.ReclaimResult
	rows, err := t.q.Query(t.ctx, `SELECT DISTINCT d.target_pubkey FROM dedup d
JOIN items i ON i.target_pubkey = d.target_pubkey AND i.seq = d.seq
WHERE d.sender_pubkey = $1 AND d.target_pubkey <> $1`, pubkey)
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	targets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	locks := []string{queueLock(pubkey), senderLock(pubkey)}
	for _, tg := range targets {
		locks = append(locks, queueLock(tg))
	}
	sort.Strings(locks)
	if err := t.lock(locks...); err != nil {
		return res, fmt.Errorf("reclaim: lock: %w", err)
	}
	// Its own queue, then what it queued for others (found through its dedup rows).
	for _, q := range []string{
		`DELETE FROM items WHERE target_pubkey = $1 RETURNING target_pubkey, sender_pubkey, bytes`,
		`DELETE FROM items i USING dedup d WHERE d.sender_pubkey = $1 AND d.target_pubkey <> $1
	AND i.target_pubkey = d.target_pubkey AND i.seq = d.seq AND i.sender_pubkey = $1
RETURNING i.target_pubkey, i.sender_pubkey, i.bytes`,
	} {
		rows, err := t.q.Query(t.ctx, q, pubkey)
		if err != nil {
			return res, fmt.Errorf("reclaim: %w", err)
		}
		per := map[string]*deleted{}
		for rows.Next() {
			var target, sender string
			var n int64
			if err := rows.Scan(&target, &sender, &n); err != nil {
				rows.Close()
				return res, fmt.Errorf("reclaim: %w", err)
			}
			if per[target] == nil {
				per[target] = &deleted{}
			}
			per[target].add(sender, n)
			res.Items, res.Bytes = res.Items+1, res.Bytes+n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return res, fmt.Errorf("reclaim: %w", err)
		}
		b := &pgx.Batch{}
		for target, ds := range per {
			ds.queue(b, target)
		}
		if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
			return res, fmt.Errorf("reclaim: usage: %w", err)
		}
	}
	tag, err := t.q.Exec(t.ctx, "DELETE FROM dedup WHERE sender_pubkey = $1", pubkey)
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	res.DedupRows = tag.RowsAffected()
	b := &pgx.Batch{}
	b.Queue("DELETE FROM usage WHERE target_pubkey = '' AND sender_pubkey = $1", pubkey)
	b.Queue("DELETE FROM enc_ads WHERE host_pubkey = $1", pubkey)
	b.Queue("DELETE FROM sender_lists WHERE target_pubkey = $1", pubkey)
	b.Queue("DELETE FROM sender_list_members WHERE target_pubkey = $1", pubkey)
	if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	return res, nil
}
