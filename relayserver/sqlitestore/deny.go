package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// DenyList implements relayserver.Store.
func (s *Store) DenyList(ctx context.Context) ([]relayserver.DenyEntry, error) {
	return denyList(ctx, s.db)
}

// UpdateDeny implements relayserver.DenyStore through Update.
func (s *Store) UpdateDeny(ctx context.Context, fn func(relayserver.DenyWriter) error) error {
	return s.Update(ctx, func(tx relayserver.Tx) error { return fn(tx) })
}

func denyList(ctx context.Context, q querier) ([]relayserver.DenyEntry, error) {
	rows, err := q.QueryContext(ctx, "SELECT "+storekit.DenyCols+" FROM deny ORDER BY added_at, kind, value")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: deny list: %w", err)
	}
	defer rows.Close()
	out, err := storekit.ScanDenyEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: deny list: %w", err)
	}
	return out, nil
}

func putDeny(ctx context.Context, q querier, d relayserver.DenyEntry) error {
	if _, err := q.ExecContext(ctx, "DELETE FROM deny WHERE until <> 0 AND until <= ?", storekit.MS(d.AddedAt)); err != nil {
		return fmt.Errorf("put deny: %w", err)
	}
	_, err := q.ExecContext(ctx, `
INSERT INTO deny(kind, value, added_at, until, note) VALUES(?, ?, ?, ?, ?)
ON CONFLICT(kind, value) DO UPDATE SET added_at = excluded.added_at, until = excluded.until, note = excluded.note`,
		string(d.Kind), d.Value, storekit.MS(d.AddedAt), storekit.MS(d.Until), d.Note)
	if err != nil {
		return fmt.Errorf("put deny: %w", err)
	}
	return nil
}

func deleteDeny(ctx context.Context, q querier, kind relayserver.DenyKind, value string) (bool, error) {
	res, err := q.ExecContext(ctx, "DELETE FROM deny WHERE kind = ? AND value = ?", string(kind), value)
	if err != nil {
		return false, fmt.Errorf("delete deny: %w", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (t *tx) PutDeny(d relayserver.DenyEntry) error { return putDeny(bg, t.q, d) }

func (t *tx) DeleteDeny(kind relayserver.DenyKind, value string) (bool, error) {
	return deleteDeny(bg, t.q, kind, value)
}

// DenyRevoke implements relayserver.Tx (storekit.DenyCandidates: a fingerprint entry reads the
// keys of all live enrolments; a rare operator action, at most MaxEnrolments).
func (t *tx) DenyRevoke(d relayserver.DenyEntry, at time.Time) ([]string, error) {
	query, args, ok := storekit.DenyCandidates(d, "?")
	if !ok {
		return nil, nil
	}
	rows, err := t.q.QueryContext(bg, query, args...)
	if err != nil {
		return nil, fmt.Errorf("deny revoke: %w", err)
	}
	keys, err := storekit.DeniedKeys(rows, d)
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("deny revoke: %w", err)
	}
	for _, k := range keys {
		if _, err := t.q.ExecContext(bg, "UPDATE enrolments SET denied_at = ? WHERE host_pubkey = ?", storekit.MS(at), k); err != nil {
			return nil, fmt.Errorf("deny revoke: %w", err)
		}
	}
	return keys, nil
}

// DenyFile is the deny list of a store directory opened without the store's lock, so an operator
// can change it while a relay serves the store: the deny table is the one table another process
// writes then (each change one immediate transaction, waiting for the relay's writer), and the
// relay reads it every relayserver.Options.DenyPollEvery. It never migrates: the store must exist
// at this binary's schema version.
type DenyFile struct{ db *sql.DB }

// OpenDenyFile opens the deny list of the store in dir. Close it when done.
func OpenDenyFile(ctx context.Context, dir string) (*DenyFile, error) {
	src := filepath.Join(dir, DBFile)
	if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("sqlitestore: deny list: %w", err)
	}
	db, err := sql.Open("sqlite", src+"?_pragma=busy_timeout(10000)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: deny list %s: %w", src, err)
	}
	db.SetMaxOpenConns(1)
	v, err := schemaVersion(ctx, db)
	if err == nil && v != SchemaVersion {
		err = fmt.Errorf("schema version %d, this binary writes %d: run `agentmbx relay serve` of this version once (it migrates the store)", v, SchemaVersion)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlitestore: deny list %s: %w", src, err)
	}
	return &DenyFile{db: db}, nil
}

// DenyList implements relayserver.DenyStore.
func (f *DenyFile) DenyList(ctx context.Context) ([]relayserver.DenyEntry, error) {
	return denyList(ctx, f.db)
}

// UpdateDeny implements relayserver.DenyStore: fn runs in one immediate transaction.
func (f *DenyFile) UpdateDeny(ctx context.Context, fn func(relayserver.DenyWriter) error) (err error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: deny list: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := fn(denyFileTx{ctx: ctx, tx: tx}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: deny list: commit: %w", err)
	}
	return nil
}

// Close releases the database.
func (f *DenyFile) Close() error { return f.db.Close() }

type denyFileTx struct {
	ctx context.Context
	tx  *sql.Tx
}

func (t denyFileTx) PutDeny(d relayserver.DenyEntry) error { return putDeny(t.ctx, t.tx, d) }

func (t denyFileTx) DeleteDeny(kind relayserver.DenyKind, value string) (bool, error) {
	return deleteDeny(t.ctx, t.tx, kind, value)
}

func markReclaim(ctx context.Context, q querier, kind relayserver.DenyKind, value string, at time.Time) (bool, error) {
	res, err := q.ExecContext(ctx, "UPDATE deny SET reclaim_at = ? WHERE kind = ? AND value = ?", storekit.MS(at), string(kind), value)
	if err != nil {
		return false, fmt.Errorf("mark reclaim: %w", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (t *tx) MarkReclaim(kind relayserver.DenyKind, value string, at time.Time) (bool, error) {
	return markReclaim(bg, t.q, kind, value, at)
}

func (t denyFileTx) MarkReclaim(kind relayserver.DenyKind, value string, at time.Time) (bool, error) {
	return markReclaim(t.ctx, t.tx, kind, value, at)
}

// TakeReclaim implements relayserver.Tx.
func (t *tx) TakeReclaim(kind relayserver.DenyKind, value string, at time.Time) (bool, error) {
	res, err := t.q.ExecContext(bg, `UPDATE deny SET reclaimed_at = MAX(?, reclaim_at)
WHERE kind = ? AND value = ? AND reclaim_at > reclaimed_at`, storekit.MS(at), string(kind), value)
	if err != nil {
		return false, fmt.Errorf("take reclaim: %w", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// ReclaimDone implements relayserver.Tx.
func (t *tx) ReclaimDone(kind relayserver.DenyKind, value string, r relayserver.ReclaimResult) error {
	if _, err := t.q.ExecContext(bg, "UPDATE deny SET reclaimed = ? WHERE kind = ? AND value = ?",
		storekit.ReclaimJSON(r), string(kind), value); err != nil {
		return fmt.Errorf("reclaim done: %w", err)
	}
	return nil
}

// DeniedKeys implements relayserver.Tx.
func (t *tx) DeniedKeys(d relayserver.DenyEntry) ([]string, error) {
	query, args, ok := storekit.DeniedCandidates(d, "?")
	if !ok {
		return nil, nil
	}
	rows, err := t.q.QueryContext(bg, query, args...)
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

// Reclaim implements relayserver.Tx. The key's items in other queues are found through its dedup
// rows (items have no index by sender).
func (t *tx) Reclaim(pubkey string) (relayserver.ReclaimResult, error) {
	var res relayserver.ReclaimResult
	id, err := t.keyID(pubkey, false)
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	for _, q := range []string{
		"DELETE FROM enc_ads WHERE host_pubkey = ?1",
		"DELETE FROM sender_lists WHERE target_pubkey = ?1",
		"DELETE FROM sender_list_members WHERE target_pubkey = ?1",
	} {
		if _, err := t.q.ExecContext(bg, q, pubkey); err != nil {
			return res, fmt.Errorf("reclaim: %w", err)
		}
	}
	if id == 0 {
		return res, nil // the store never queued anything of the key
	}
	// Its own queue, then what it queued for others.
	for _, sel := range []string{
		`SELECT t.pubkey, s.pubkey, COUNT(*), SUM(i.bytes) FROM items i
			JOIN keys t ON t.id = i.target JOIN keys s ON s.id = i.sender
			WHERE i.target = ?1 GROUP BY i.sender`,
		`SELECT t.pubkey, s.pubkey, COUNT(*), SUM(i.bytes) FROM dedup d
			JOIN items i ON i.target = d.target AND i.seq = d.seq AND i.sender = d.sender
			JOIN keys t ON t.id = i.target JOIN keys s ON s.id = i.sender
			WHERE d.sender = ?1 AND d.target <> ?1 GROUP BY i.target`,
	} {
		if err := t.reclaimItems(sel, id, &res); err != nil {
			return res, err
		}
	}
	for _, q := range []string{
		"DELETE FROM items WHERE target = ?1",
		`DELETE FROM items WHERE (target, seq) IN (SELECT target, seq FROM dedup WHERE sender = ?1 AND target <> ?1)
			AND sender = ?1`,
	} {
		if _, err := t.q.ExecContext(bg, q, id); err != nil {
			return res, fmt.Errorf("reclaim: %w", err)
		}
	}
	r, err := t.q.ExecContext(bg, "DELETE FROM dedup WHERE sender = ?", id)
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	res.DedupRows, _ = r.RowsAffected()
	t.addDedup(pubkey, -res.DedupRows)
	return res, nil
}

// reclaimItems reads the (target, sender, items, bytes) groups of sel, about to be deleted, into
// res and off the usage counters.
func (t *tx) reclaimItems(sel string, id int64, res *relayserver.ReclaimResult) error {
	rows, err := t.q.QueryContext(bg, sel, id)
	if err != nil {
		return fmt.Errorf("reclaim: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var target, sender string
		var n, b int64
		if err := rows.Scan(&target, &sender, &n, &b); err != nil {
			return fmt.Errorf("reclaim: %w", err)
		}
		t.addUsage(target, sender, -n, -b)
		res.Items, res.Bytes = res.Items+n, res.Bytes+b
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reclaim: %w", err)
	}
	return nil
}
