package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

var _ relayserver.UsageReporter = (*Store)(nil)

// DedupRows implements relayserver.UsageReporter from the senders' counters.
func (s *Store) DedupRows(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(items), 0) FROM usage WHERE target_pubkey = ''").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: dedup rows: %w", err)
	}
	return n, nil
}

// Usage implements relayserver.UsageReporter, from one snapshot of the usage counters (one row per
// target and sender, and one per sender for its dedup rows; never the items).
func (s *Store) Usage(ctx context.Context, topN int) (relayserver.UsageReport, error) {
	return usageReport(ctx, s.db, topN)
}

var usageSQL = strings.NewReplacer("P1", "?1", "P2", "?2").Replace(storekit.UsageSQL)

func usageReport(ctx context.Context, db *sql.DB, topN int) (relayserver.UsageReport, error) {
	var r relayserver.UsageReport
	conn, err := db.Conn(ctx)
	if err != nil {
		return r, fmt.Errorf("sqlitestore: usage: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return r, fmt.Errorf("sqlitestore: usage: %w", err)
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
	if err := conn.QueryRowContext(ctx, storekit.UsageTotalsSQL).Scan(&r.Queued.Items, &r.Queued.Bytes, &r.DedupRows); err != nil {
		return r, fmt.Errorf("sqlitestore: usage: %w", err)
	}
	rows, err := conn.QueryContext(ctx, usageSQL, relayserver.DedupRowBytes, max(topN, 0))
	if err != nil {
		return r, fmt.Errorf("sqlitestore: usage: %w", err)
	}
	r.Keys, err = storekit.ScanKeyUsage(rows)
	rows.Close()
	if err != nil {
		return r, fmt.Errorf("sqlitestore: usage: %w", err)
	}
	for i := range r.Keys {
		e, err := getEnrolment(ctx, conn, r.Keys[i].Pubkey)
		if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
			return r, fmt.Errorf("sqlitestore: usage: %w", err)
		}
		r.Keys[i].Enrolment = e
	}
	return r, nil
}

// UsageFile reads what uses a store's space without its lock, so an operator can look while a
// relay serves the store (`agentmbx relay usage`): a read-only connection that sees committed
// state. It never migrates: the store must be at this binary's schema version.
type UsageFile struct{ db *sql.DB }

// OpenUsageFile opens the store in dir for reading. Close it when done.
func OpenUsageFile(ctx context.Context, dir string) (*UsageFile, error) {
	src := filepath.Join(dir, DBFile)
	if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("sqlitestore: usage: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+src+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: usage %s: %w", src, err)
	}
	db.SetMaxOpenConns(1)
	v, err := schemaVersion(ctx, db)
	if err == nil && v != SchemaVersion {
		err = fmt.Errorf("schema version %d, this binary reads %d: run `agentmbx relay serve` of this version once (it migrates the store)", v, SchemaVersion)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlitestore: usage %s: %w", src, err)
	}
	return &UsageFile{db: db}, nil
}

// Usage is Store.Usage.
func (f *UsageFile) Usage(ctx context.Context, topN int) (relayserver.UsageReport, error) {
	return usageReport(ctx, f.db, topN)
}

// Close releases the database.
func (f *UsageFile) Close() error { return f.db.Close() }
