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

// QueueStats implements relayserver.QueueStatter. It reads one snapshot: the totals and the
// deepest targets from the usage counters (a scan of the usage table, one row per target and
// sender, never of the items), the oldest queued item through the expiry index (the item that
// expires first, which is the oldest accepted while the retention has not changed), the live
// enrolments, and the sizes of the database and WAL files.
func (s *Store) QueueStats(ctx context.Context, topN int) (relayserver.QueueStats, error) {
	var qs relayserver.QueueStats
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return qs, fmt.Errorf("sqlitestore: queue stats: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return qs, fmt.Errorf("sqlitestore: queue stats: %w", err)
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
	if err := queueTotals(ctx, conn, topN, &qs); err != nil {
		return qs, fmt.Errorf("sqlitestore: queue stats: %w", err)
	}
	for _, name := range []string{DBFile, DBFile + "-wal"} {
		if fi, err := os.Stat(filepath.Join(s.dir, name)); err == nil {
			qs.StoreBytes += fi.Size()
		}
	}
	return qs, nil
}

// queueTotals fills qs from the snapshot open on conn.
func queueTotals(ctx context.Context, conn *sql.Conn, topN int, qs *relayserver.QueueStats) error {
	err := conn.QueryRowContext(ctx, `SELECT COALESCE(SUM(items), 0), COALESCE(SUM(bytes), 0),
COALESCE(SUM(items > 0), 0) FROM usage WHERE sender_pubkey = ''`).Scan(&qs.Items, &qs.Bytes, &qs.Targets)
	if err != nil {
		return err
	}
	var oldest sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT accepted_at FROM items ORDER BY expires_at LIMIT 1").Scan(&oldest)
	if err != nil && err != sql.ErrNoRows {
		return err
	}
	if oldest.Valid {
		qs.OldestAcceptedAt = time.UnixMilli(oldest.Int64).UTC()
	}
	err = conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM enrolments WHERE revoked_at IS NULL").Scan(&qs.LiveEnrolments)
	if err != nil {
		return err
	}
	if topN <= 0 {
		return nil
	}
	rows, err := conn.QueryContext(ctx, `SELECT target_pubkey, items, bytes FROM usage
WHERE sender_pubkey = '' AND items > 0 ORDER BY items DESC, bytes DESC, target_pubkey LIMIT ?`, topN)
	if err != nil {
		return err
	}
	defer rows.Close()
	qs.Top, err = storekit.ScanDepths(rows)
	return err
}

// ReportCommits implements relayserver.CommitReporter.
func (s *Store) ReportCommits(fn func(units int, took time.Duration)) {
	s.w.Report(fn)
}
