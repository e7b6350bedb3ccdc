package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

func testNewStoreMeta(t *testing.T, s relayserver.Store) {
	m, err := s.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion < 1 || len(m.Epoch) != 36 || m.RelayPubkey != "" || !m.Heartbeat.IsZero() {
		t.Fatalf("new store meta = %+v, want a schema version, a uuid epoch, no relay key, no heartbeat", m)
	}
}

func testBindRelayKey(t *testing.T, s relayserver.Store) {
	if err := s.BindRelayKey(ctx, "KEY-A"); err != nil {
		t.Fatal(err)
	}
	if err := s.BindRelayKey(ctx, "KEY-A"); err != nil {
		t.Fatalf("rebinding the same key: %v", err)
	}
	if err := s.BindRelayKey(ctx, "KEY-B"); !errors.Is(err, relayserver.ErrRelayKeyMismatch) {
		t.Fatalf("binding another key = %v, want ErrRelayKeyMismatch", err)
	}
	m, _ := s.Meta(ctx)
	if m.RelayPubkey != "KEY-A" {
		t.Fatalf("relay key = %q, want KEY-A", m.RelayPubkey)
	}
}

func testRotateEpochAndHeartbeat(t *testing.T, s relayserver.Store) {
	m, _ := s.Meta(ctx)
	e, err := s.RotateEpoch(ctx)
	if err != nil || e == m.Epoch || len(e) != 36 {
		t.Fatalf("RotateEpoch = %q, %v; want a new epoch", e, err)
	}
	if err := s.Heartbeat(ctx, time.UnixMilli(123456)); err != nil {
		t.Fatal(err)
	}
	m2, _ := s.Meta(ctx)
	if m2.Epoch != e || m2.Heartbeat.UnixMilli() != 123456 || m2.SchemaVersion != m.SchemaVersion {
		t.Fatalf("meta = %+v", m2)
	}
	// The heartbeat is whatever was written last, also when a clock went back.
	if err := s.Heartbeat(ctx, time.UnixMilli(120000)); err != nil {
		t.Fatal(err)
	}
	if m3, _ := s.Meta(ctx); m3.Heartbeat.UnixMilli() != 120000 || m3.Epoch != e {
		t.Fatalf("meta after a second heartbeat = %+v", m3)
	}
}

func testClosedStoreRefusesUpdates(t *testing.T, s relayserver.Store) {
	Insert(t, s, NewItem(Key(1), Key(2), "a", "a", 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err := s.Update(ctx, func(relayserver.Tx) error { return nil })
	if !errors.Is(err, relayserver.ErrClosed) {
		t.Fatalf("Update after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
