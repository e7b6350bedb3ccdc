package sqlitestore

import (
	"errors"
	"fmt"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// Rotate implements relayserver.Tx. Every step runs in the caller's unit, so a failure anywhere
// leaves the old key exactly as it was.
func (t *tx) Rotate(r relayserver.Rotation) (relayserver.RotateResult, error) {
	var res relayserver.RotateResult
	nw, retried, err := relayserver.PlanRotation(t, r)
	if err != nil || retried {
		return res, err
	}
	// Revoke the old key first so the new one can take its name inside the account.
	if _, err := t.q.ExecContext(bg, "UPDATE enrolments SET revoked_at = ? WHERE host_pubkey = ?",
		storekit.MS(r.At), r.OldPubkey); err != nil {
		return res, fmt.Errorf("rotate: revoke: %w", err)
	}
	if err := t.PutEnrolment(nw); err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}

	oldID, err := t.keyID(r.OldPubkey, true)
	if err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}
	newID, err := t.keyID(r.NewPubkey, true)
	if err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}

	// Re-sequence the old queue after whatever the new key already has, in order.
	type row struct {
		seq      int64
		sender   int64
		itemID   string
		accepted int64
	}
	rows, err := t.q.QueryContext(bg, `SELECT seq, sender, item_id, accepted_at FROM items
WHERE target = ? ORDER BY seq`, oldID)
	if err != nil {
		return res, fmt.Errorf("rotate: queue: %w", err)
	}
	var queue []row
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.seq, &x.sender, &x.itemID, &x.accepted); err != nil {
			rows.Close()
			return res, fmt.Errorf("rotate: queue: %w", err)
		}
		queue = append(queue, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("rotate: queue: %w", err)
	}
	for _, x := range queue {
		var held int
		if err := t.q.QueryRowContext(bg, `SELECT COUNT(*) FROM dedup
WHERE sender = ? AND item_id = ? AND target = ?`, x.sender, x.itemID, newID).Scan(&held); err != nil {
			return res, fmt.Errorf("rotate: %w", err)
		}
		if held > 0 {
			// The new key already holds this item from this sender: the old copy is a repeat.
			if _, err := t.q.ExecContext(bg, "DELETE FROM items WHERE target = ? AND seq = ?",
				oldID, x.seq); err != nil {
				return res, fmt.Errorf("rotate: drop repeat: %w", err)
			}
			continue
		}
		seq, err := t.allocSeq(r.NewPubkey, storekit.MS(r.At))
		if err != nil {
			return res, fmt.Errorf("rotate: seq: %w", err)
		}
		if _, err := t.q.ExecContext(bg, `UPDATE items SET target = ?, seq = ?
WHERE target = ? AND seq = ?`, newID, seq, oldID, x.seq); err != nil {
			return res, fmt.Errorf("rotate: move item: %w", err)
		}
		// The new key's dedup row names the new seq; the old key's row stays as it was.
		if _, err := t.q.ExecContext(bg, `INSERT INTO dedup(sender, item_id, target, wire_hash, seq, accepted_at)
SELECT sender, item_id, ?1, wire_hash, ?2, accepted_at FROM dedup
WHERE sender = ?3 AND item_id = ?4 AND target = ?5`,
			newID, seq, x.sender, x.itemID, oldID); err != nil {
			return res, fmt.Errorf("rotate: copy dedup: %w", err)
		}
		res.MovedItems++
	}
	// Dedup rows are copied, never moved: the old key's rows stay, so a sender whose accept was
	// lost and who still addresses the old key gets its duplicate (with the original seq) rather
	// than a refusal; copies for the new key (rows it has already win) make the same bytes
	// addressed to it duplicates too. Rows the rotated host wrote as a sender follow it, so its
	// retries with the new key stay duplicates.

	// The allowlist moves with the host, unless the new key published its own.
	if _, err := t.SenderList(r.NewPubkey); errors.Is(err, relayserver.ErrNotFound) {
		for _, q := range []string{
			"UPDATE sender_lists SET target_pubkey = ?1 WHERE target_pubkey = ?2",
			"UPDATE sender_list_members SET target_pubkey = ?1 WHERE target_pubkey = ?2",
		} {
			if _, err := t.q.ExecContext(bg, q, r.NewPubkey, r.OldPubkey); err != nil {
				return res, fmt.Errorf("rotate: move sender list: %w", err)
			}
		}
	} else if err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}
	// The usage rows of both queues are recounted below: write the counters pending so far.
	if err := t.flush(true); err != nil {
		return res, fmt.Errorf("rotate: %w", err)
	}
	for _, q := range []string{
		"DELETE FROM sender_lists WHERE target_pubkey = ?2",
		"DELETE FROM sender_list_members WHERE target_pubkey = ?2",
		`INSERT OR IGNORE INTO dedup(sender, item_id, target, wire_hash, seq, accepted_at)
			SELECT sender, item_id, ?3, wire_hash, seq, accepted_at FROM dedup WHERE target = ?4`,
		"UPDATE OR IGNORE dedup SET sender = ?3 WHERE sender = ?4",
		"DELETE FROM dedup WHERE sender = ?4",
		// Usage of both queues, recounted.
		"DELETE FROM usage WHERE target_pubkey IN (?1, ?2)",
		`INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
			SELECT ?1, k.pubkey, COUNT(*), SUM(i.bytes) FROM items i JOIN keys k ON k.id = i.sender
			WHERE i.target = ?3 GROUP BY k.pubkey`,
		`INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
			SELECT ?1, '', COUNT(*), SUM(bytes) FROM items WHERE target = ?3 HAVING COUNT(*) > 0`,
		// Other targets that accepted the old key accept the new one.
		"UPDATE OR IGNORE sender_list_members SET sender_pubkey = ?1 WHERE sender_pubkey = ?2",
		"DELETE FROM sender_list_members WHERE sender_pubkey = ?2",
		// The old key's enc ad names a key that no longer speaks for the host.
		"DELETE FROM enc_ads WHERE host_pubkey = ?2",
		// The dedup rows charged to senders changed (rows for the old key copied to the new one,
		// the old key's own rows moved to it): those senders' counters, recounted.
		`DELETE FROM usage WHERE target_pubkey = '' AND sender_pubkey IN (SELECT pubkey FROM keys
			WHERE id IN (SELECT sender FROM dedup WHERE target IN (?3, ?4)) OR id IN (?3, ?4))`,
		`INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
			SELECT '', k.pubkey, COUNT(*), 0 FROM dedup d JOIN keys k ON k.id = d.sender
			WHERE d.sender IN (SELECT sender FROM dedup WHERE target IN (?3, ?4) UNION SELECT ?3 UNION SELECT ?4)
			GROUP BY d.sender`,
	} {
		if _, err := t.q.ExecContext(bg, q, r.NewPubkey, r.OldPubkey, newID, oldID); err != nil {
			return res, fmt.Errorf("rotate: %w", err)
		}
	}
	return res, nil
}
