package relayserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// serveOnce runs Serve at the given clock until it is listening, then stops it, and returns the
// store's epoch before and after.
func serveOnce(t *testing.T, dir string, heartbeat, now time.Time) (before, after string) {
	t.Helper()
	st, err := sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(bg, heartbeat); err != nil {
		t.Fatal(err)
	}
	m, _ := st.Meta(bg)
	st.Close()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	addrFile := filepath.Join(t.TempDir(), "addr")
	err = relayserver.Serve(ctx, relayserver.ServeConfig{
		StoreDir: dir, Listen: "127.0.0.1:0", AddrFile: addrFile,
		Getenv: func(string) string { return "" },
		Open: func(ctx context.Context, dir string) (relayserver.Store, error) {
			return sqlitestore.Open(ctx, dir, nil)
		},
		Options: relayserver.Options{Clock: func() time.Time { return now }},
		Ready:   func(string) { cancel() },
	})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if b, err := os.ReadFile(addrFile); err != nil || !strings.HasPrefix(string(b), "127.0.0.1:") {
		t.Fatalf("addr file = %q, %v", b, err)
	}
	st, err = sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m2, _ := st.Meta(bg)
	if !m2.Heartbeat.Equal(now) {
		t.Fatalf("heartbeat after Serve = %v, want %v", m2.Heartbeat, now)
	}
	return m.Epoch, m2.Epoch
}

func TestServeRotatesEpochOnStaleHeartbeat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if before, after := serveOnce(t, dir, t0, t0.Add(time.Minute)); before != after {
		t.Fatalf("a fresh heartbeat rotated the epoch %s → %s", before, after)
	}
	if before, after := serveOnce(t, dir, t0, t0.Add(11*time.Minute)); before == after {
		t.Fatalf("a heartbeat 11 minutes old kept the epoch %s", before)
	}
}

// A relay started with a key the store does not belong to refuses, and touches nothing: neither
// the epoch (a stale heartbeat would rotate it) nor the heartbeat (refreshing it would hide, from
// the right relay's next start, that the store was restored or down for long).
func TestServeWithAnotherKeyChangesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.BindRelayKey(bg, keyFor(t, 0).PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(bg, t0); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Meta(bg)
	st.Close()
	other := keyFor(t, 1)
	now := t0.Add(mbx.RelayHeartbeatStale + time.Minute)
	err = relayserver.Serve(bg, relayserver.ServeConfig{
		StoreDir: dir, Listen: "127.0.0.1:0",
		Getenv: func(n string) string {
			if n == relayserver.EnvRelayKey {
				return other.Seed()
			}
			return ""
		},
		Open: func(ctx context.Context, dir string) (relayserver.Store, error) {
			return sqlitestore.Open(ctx, dir, nil)
		},
		Options: relayserver.Options{Clock: func() time.Time { return now }},
		Ready:   func(string) { t.Error("a relay with another key started listening") },
	})
	if !errors.Is(err, relayserver.ErrRelayKeyMismatch) {
		t.Fatalf("Serve with another key = %v, want ErrRelayKeyMismatch", err)
	}
	st, err = sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	after, _ := st.Meta(bg)
	if after.Epoch != before.Epoch || !after.Heartbeat.Equal(before.Heartbeat) {
		t.Fatalf("a refused start changed the store: epoch %s → %s, heartbeat %v → %v",
			before.Epoch, after.Epoch, before.Heartbeat, after.Heartbeat)
	}
}
