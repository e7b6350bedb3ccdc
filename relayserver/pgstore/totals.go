package pgstore

import (
	"context"
	"fmt"

	"github.com/agentmbx/agentmbx/relayserver"
)

// Totals implements relayserver.Store.
func (s *Store) Totals(ctx context.Context) (relayserver.Counts, error) {
	var c relayserver.Counts
	err := s.pool.QueryRow(ctx,
		"SELECT COALESCE(SUM(items), 0)::bigint, COALESCE(SUM(bytes), 0)::bigint FROM usage WHERE sender_pubkey = ''").Scan(&c.Items, &c.Bytes)
	if err != nil {
		return c, fmt.Errorf("pgstore: totals: %w", err)
	}
	return c, nil
}
