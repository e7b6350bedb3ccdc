package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

var _ relayserver.UsageReporter = (*Store)(nil)

// DedupRows implements relayserver.UsageReporter from the senders' counters.
func (s *Store) DedupRows(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT COALESCE(sum(items), 0)::bigint FROM usage WHERE target_pubkey = ''").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: dedup rows: %w", err)
	}
	return n, nil
}

var (
	usageSQL = strings.NewReplacer("SUM(", "sum(", "P1", "$1::bigint", "P2", "$2").Replace(
		strings.ReplaceAll(storekit.UsageSQL, "SELECT k, qi, qb, si, sb, dr FROM agg",
			"SELECT k, qi::bigint, qb::bigint, si::bigint, sb::bigint, dr::bigint FROM agg"))
	usageTotalsSQL = strings.ReplaceAll(storekit.UsageTotalsSQL, "ELSE 0 END), 0)", "ELSE 0 END), 0)::bigint")
)

// Usage implements relayserver.UsageReporter from one snapshot of the usage counters.
func (s *Store) Usage(ctx context.Context, topN int) (relayserver.UsageReport, error) {
	var r relayserver.UsageReport
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			r = relayserver.UsageReport{}
			if err := tx.QueryRow(ctx, usageTotalsSQL).Scan(&r.Queued.Items, &r.Queued.Bytes, &r.DedupRows); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, usageSQL, relayserver.DedupRowBytes, max(topN, 0))
			if err != nil {
				return err
			}
			r.Keys, err = storekit.ScanKeyUsage(rows)
			rows.Close()
			if err != nil {
				return err
			}
			for i := range r.Keys {
				e, err := getEnrolment(ctx, tx, r.Keys[i].Pubkey)
				if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
					return err
				}
				r.Keys[i].Enrolment = e
			}
			return nil
		})
	if err != nil {
		return r, fmt.Errorf("pgstore: usage: %w", err)
	}
	return r, nil
}
