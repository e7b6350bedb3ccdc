package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// Enrolment implements relayserver.Store.
func (s *Store) Enrolment(ctx context.Context, pubkey string) (relayserver.Enrolment, error) {
	e, err := getEnrolment(ctx, s.pool, pubkey)
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return e, fmt.Errorf("pgstore: %w", err)
	}
	return e, err
}

// EnrolmentsByName implements relayserver.Store.
func (s *Store) EnrolmentsByName(ctx context.Context, name string, limit int) ([]relayserver.Enrolment, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+storekit.EnrolmentCols+` FROM enrolments
WHERE lower(host_name) = lower($1) AND revoked_at IS NULL ORDER BY enrolled_at, host_pubkey LIMIT $2`,
		name, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enrolments by name: %w", err)
	}
	defer rows.Close()
	out, err := storekit.ScanEnrolments(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enrolments by name: %w", err)
	}
	return out, nil
}

// EncAd implements relayserver.Store.
func (s *Store) EncAd(ctx context.Context, pubkey string) (relayserver.EncAd, error) {
	ad, err := getEncAd(ctx, s.pool, pubkey)
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return ad, fmt.Errorf("pgstore: %w", err)
	}
	return ad, err
}

// SenderList implements relayserver.Store.
func (s *Store) SenderList(ctx context.Context, target string) (relayserver.SenderList, error) {
	l, err := getSenderList(ctx, s.pool, target)
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return l, fmt.Errorf("pgstore: %w", err)
	}
	return l, err
}

// Head implements relayserver.Store.
func (s *Store) Head(ctx context.Context, target string) (relayserver.Head, error) {
	h, err := getHead(ctx, s.pool, target)
	if err != nil {
		return h, fmt.Errorf("pgstore: %w", err)
	}
	return h, nil
}

// pullSQL reads a page in one statement, so from one snapshot: the head, and the items after $2
// cut at $3 items and, past the first, $4 bytes (sizes are summed before any wire is read), with
// whether more remain. The first row carries the head even when the page is empty.
const pullSQL = `WITH c AS (
	SELECT seq, row_number() OVER w AS n, sum(bytes) OVER w AS run
	FROM (SELECT seq, bytes FROM items WHERE target_pubkey = $1 AND seq > $2 ORDER BY seq LIMIT $3 + 1) x
	WINDOW w AS (ORDER BY seq)
), p AS (
	SELECT seq FROM c WHERE n <= $3 AND (n = 1 OR run <= $4)
)
SELECT h.head, h.acked, (SELECT count(*) FROM c) > (SELECT count(*) FROM p),
	i.seq, i.kind, i.item_id, i.sender_pubkey, i.wire_hash, i.accepted_at, i.expires_at, i.wire
FROM (SELECT COALESCE((SELECT next_seq - 1 FROM seqs WHERE target_pubkey = $1), 0) AS head,
	COALESCE((SELECT acked_through FROM acked WHERE target_pubkey = $1), 0) AS acked) h
LEFT JOIN (p JOIN items i ON i.target_pubkey = $1 AND i.seq = p.seq) ON true
ORDER BY i.seq`

// Pull implements relayserver.Store. Its single statement sees one snapshot; with the seq rule
// of the writers (see the package doc) no item below the page's last seq can still commit.
func (s *Store) Pull(ctx context.Context, target string, after int64, limit int, maxBytes int64) (relayserver.Page, error) {
	var p relayserver.Page
	if limit < 1 {
		limit = 1
	}
	rows, err := s.pool.Query(ctx, pullSQL, target, after, limit, maxBytes)
	if err != nil {
		return p, fmt.Errorf("pgstore: pull: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq, acc, exp          *int64
			kind, id, sender, hash *string
			wire                   []byte
		)
		if err := rows.Scan(&p.HeadSeq, &p.AckedThrough, &p.More, &seq, &kind, &id, &sender, &hash,
			&acc, &exp, &wire); err != nil {
			return p, fmt.Errorf("pgstore: pull: %w", err)
		}
		if seq == nil {
			continue // the empty page's head row
		}
		p.Items = append(p.Items, relayserver.Item{Target: target, Seq: *seq, Kind: relayserver.Kind(*kind),
			ItemID: *id, Sender: *sender, WireHash: *hash, Wire: wire, AcceptedAt: storekit.FromMS(*acc), ExpiresAt: storekit.FromMS(*exp)})
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("pgstore: pull: %w", err)
	}
	return p, nil
}
