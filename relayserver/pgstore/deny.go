package pgstore

import (
	"context"
	"fmt"
	"time"

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
