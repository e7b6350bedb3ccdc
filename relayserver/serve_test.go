package relayserver_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// serveConfig is Serve over the SQLite store in dir on 127.0.0.1:0, its clock fixed at now, the
// relay key k given as MBX_RELAY_KEY (a zero k: no variable, so relay.key serves) and log as the
// logger of the relay and its store (nil: none).
func serveConfig(dir string, k mbx.SigningKey, now time.Time, log *slog.Logger) relayserver.ServeConfig {
	return relayserver.ServeConfig{
		StoreDir: dir, Listen: "127.0.0.1:0",
		Getenv: func(n string) string {
			if n == relayserver.EnvRelayKey && !k.IsZero() {
				return k.Seed()
			}
			return ""
		},
		Open: func(ctx context.Context, dir string) (relayserver.Store, error) {
			return sqlitestore.Open(ctx, dir, &sqlitestore.Options{Logger: log})
		},
		Options: relayserver.Options{Clock: func() time.Time { return now }, Logger: log},
	}
}

// startServe runs Serve with cfg until ctx ends and waits until it listens. It returns the
// relay's base URL and the channel Serve's result arrives on.
func startServe(ctx context.Context, t *testing.T, cfg relayserver.ServeConfig) (string, <-chan error) {
	t.Helper()
	addr := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Ready = func(s string) { addr <- s }
	go func() { done <- relayserver.Serve(ctx, cfg) }()
	select {
	case s := <-addr:
		return "http://" + s, done
	case err := <-done:
		t.Fatalf("Serve: %v", err)
		return "", nil
	}
}

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
	cfg := serveConfig(dir, mbx.SigningKey{}, now, nil)
	cfg.AddrFile = addrFile
	cfg.Ready = func(string) { cancel() }
	err = relayserver.Serve(ctx, cfg)
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
	cfg := serveConfig(dir, keyFor(t, 1), t0.Add(mbx.RelayHeartbeatStale+time.Minute), nil)
	cfg.Ready = func(string) { t.Error("a relay with another key started listening") }
	err = relayserver.Serve(bg, cfg)
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

// TestLogsCarryNoKeyMaterial runs a relay logging at debug level through enrolment, a push, a
// pull, refused requests and a shutdown, and checks that no private key appears in the log.
func TestLogsCarryNoKeyMaterial(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	relayKey := keyFor(t, 0)
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	base, done := startServe(ctx, t, serveConfig(dir, relayKey, t0, log))
	for _, h := range []host{a, b} {
		if err := enrolAt(base, h, t0); err != nil {
			t.Fatal(err)
		}
	}
	push := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem("01KKNTQ2CN9WJ3MR4Q1P12F02T", b)}})
	for _, c := range []struct {
		h      *host
		method string
		path   string
		body   []byte
		want   int
	}{
		{&a, "POST", "/v2/relay/items", push, 200},
		{&b, "GET", "/v2/relay/items?after=0", nil, 200},
		{&a, "POST", "/v2/relay/items", []byte(`{"items":[`), 400},
		{nil, "GET", "/v2/relay/items?after=0", nil, 401},
		{nil, "POST", "/v1/relay/enrol", []byte(`{"host":"x","pubkey":"` + a.pub() + `","sig":"` + a.key.Seed() + `"}`), 400},
	} {
		code, body, err := callURL(bg, base, c.h, t0, c.method, c.path, c.body)
		if err != nil || code != c.want {
			t.Fatalf("%s %s = %d %s, %v; want %d", c.method, c.path, code, body, err, c.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "relay serving") || !strings.Contains(out, relayKey.Fingerprint()) {
		t.Fatalf("the log has no start line with the relay key's fingerprint:\n%s", out)
	}
	for name, secret := range map[string]string{"relay": relayKey.Seed(), "alpha": a.key.Seed(), "beta": b.key.Seed()} {
		if strings.Contains(out, secret) {
			t.Fatalf("the log carries the %s private key:\n%s", name, out)
		}
	}
}
