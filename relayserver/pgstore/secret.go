package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ChallengeSecret implements relayserver.Store: 32 random bytes kept base64 in meta. The first
// replica to ask inserts its candidate; every replica then reads the one stored.
func (s *Store) ChallengeSecret(ctx context.Context) ([]byte, error) {
	cand := make([]byte, 32)
	if _, err := rand.Read(cand); err != nil {
		return nil, fmt.Errorf("pgstore: challenge secret: %w", err)
	}
	// Two replicas making the secret at once: the loser's statement may not see the winner's row
	// in its snapshot (no rows), and the next attempt does.
	var v string
	var err error
	for range 3 {
		if v, err = s.challengeSecret(ctx, cand); !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: challenge secret: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("pgstore: challenge secret: stored value is not base64: %w", err)
	}
	return b, nil
}

func (s *Store) challengeSecret(ctx context.Context, cand []byte) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, `WITH ins AS (
	INSERT INTO meta(key, value) VALUES ('challenge_secret', $1) ON CONFLICT (key) DO NOTHING RETURNING value)
SELECT value FROM ins UNION ALL SELECT value FROM meta WHERE key = 'challenge_secret' LIMIT 1`,
		base64.StdEncoding.EncodeToString(cand)).Scan(&v)
	return v, err
}
