package sqlitestore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/agentmbx/agentmbx/relayserver"
)

const metaChallengeSecret = "challenge_secret"

// ChallengeSecret implements relayserver.Store: 32 random bytes kept base64 in meta, made by
// the first call.
func (s *Store) ChallengeSecret(ctx context.Context) ([]byte, error) {
	var secret []byte
	err := s.Update(ctx, func(relayserver.Tx) error {
		v, err := getMeta(ctx, s.w.q, metaChallengeSecret)
		if err == nil {
			secret, err = base64.StdEncoding.DecodeString(v)
			return err
		}
		if !errors.Is(err, relayserver.ErrNotFound) {
			return err
		}
		secret = make([]byte, 32)
		if _, err := io.ReadFull(s.rand, secret); err != nil {
			return err
		}
		return setMeta(ctx, s.w.q, metaChallengeSecret, base64.StdEncoding.EncodeToString(secret))
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: challenge secret: %w", err)
	}
	return secret, nil
}
