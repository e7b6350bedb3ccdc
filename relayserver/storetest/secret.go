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

func testTotals(t *testing.T, s relayserver.Store) {
	if c, err := s.Totals(ctx); err != nil || c != (relayserver.Counts{}) {
		t.Fatalf("totals of a new store = %+v, %v; want zero", c, err)
	}
	Insert(t, s, NewItem(Key(1), Key(2), "a", "wire-a", T0.UnixMilli()))
	Insert(t, s, NewItem(Key(1), Key(3), "b", "wire-bb", T0.UnixMilli()))
	seq := Insert(t, s, NewItem(Key(4), Key(2), "c", "wire-ccc", T0.UnixMilli()))
	if c, err := s.Totals(ctx); err != nil || c != (relayserver.Counts{Items: 3, Bytes: 6 + 7 + 8}) {
		t.Fatalf("totals = %+v, %v; want 3 items of 21 bytes", c, err)
	}
	Ack(t, s, Key(4), seq)
	if c, err := s.Totals(ctx); err != nil || c != (relayserver.Counts{Items: 2, Bytes: 13}) {
		t.Fatalf("totals after an ack = %+v, %v; want 2 items of 13 bytes", c, err)
	}
}
