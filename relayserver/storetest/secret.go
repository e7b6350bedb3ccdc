package storetest

import (
	"bytes"
	"testing"

	"github.com/agentmbx/agentmbx/relayserver"
)

func testChallengeSecret(t *testing.T, s relayserver.Store) {
	a, err := s.ChallengeSecret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) < 32 || bytes.Equal(a, make([]byte, len(a))) {
		t.Fatalf("challenge secret = %d bytes %x, want at least 32 random bytes", len(a), a)
	}
	b, err := s.ChallengeSecret(ctx)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("second call = %x, %v; want the first secret", b, err)
	}
	if _, err := s.RotateEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ChallengeSecret(ctx); err != nil || !bytes.Equal(a, c) {
		t.Fatalf("after an epoch rotation = %x, %v; want the same secret", c, err)
	}
}
