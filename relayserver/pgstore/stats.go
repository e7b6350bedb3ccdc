package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

var (
	_ relayserver.QueueStatter   = (*Store)(nil)
	_ relayserver.CommitReporter = (*Store)(nil)
)

// QueueStats implements relayserver.QueueStatter from one snapshot (a repeatable-read,
// read-only transaction): totals and the deepest targets from the usage counters (one row per
// target and sender, never the items), the oldest queued item through the expiry index, the
// live enrolments, and the database's size.
func (s *Store) QueueStats(ctx context.Context, topN int) (relayserver.QueueStats, error) {
	var qs relayserver.QueueStats
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var oldest *int64
			err := tx.QueryRow(ctx, `SELECT COALESCE(sum(items), 0)::bigint, COALESCE(sum(bytes), 0)::bigint,
	count(*) FILTER (WHERE items > 0),
	(SELECT accepted_at FROM items ORDER BY expires_at LIMIT 1),
	(SELECT count(*) FROM enrolments WHERE revoked_at IS NULL),
	pg_database_size(current_database())
FROM usage WHERE sender_pubkey = ''`).Scan(&qs.Items, &qs.Bytes, &qs.Targets, &oldest, &qs.LiveEnrolments, &qs.StoreBytes)
			if err != nil {
				return err
			}
			if oldest != nil {
				qs.OldestAcceptedAt = storekit.FromMS(*oldest)
			}
			if topN <= 0 {
				return nil
			}
			rows, err := tx.Query(ctx, `SELECT target_pubkey, items, bytes FROM usage
WHERE sender_pubkey = '' AND items > 0 ORDER BY items DESC, bytes DESC, target_pubkey LIMIT $1`, topN)
			if err != nil {
				return err
			}
			defer rows.Close()
			qs.Top, err = storekit.ScanDepths(rows)
			return err
		})
	if err != nil {
		return qs, fmt.Errorf("pgstore: queue stats: %w", err)
	}
	return qs, nil
}

// ReportCommits implements relayserver.CommitReporter: fn is told each group commit's units and
// the time from the group's start to the end of its COMMIT.
func (s *Store) ReportCommits(fn func(units int, took time.Duration)) {
	s.w.Report(fn)
}
