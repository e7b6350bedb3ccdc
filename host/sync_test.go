package host

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// syncs fails t unless db fsyncs every commit and every growth of the file: what makes a send
// that was answered survive a power cut (the relay's SQLite store asserts synchronous=FULL).
func syncs(t *testing.T, how string, db *bbolt.DB) {
	t.Helper()
	if db.NoSync || db.NoGrowSync {
		t.Errorf("%s: bbolt NoSync=%v NoGrowSync=%v, want both false (fsync on)", how, db.NoSync, db.NoGrowSync)
	}
}

// The host's store fsyncs as the commands open it (Open with no options, or with the logger the
// CLI passes) and as the daemon runs it; only the NoSync option turns that off.
func TestStoreFsyncs(t *testing.T) {
	home := filepath.Join(t.TempDir(), "alpha")
	if err := Init(home, InitOptions{Host: "alpha"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		how  string
		opts *Options
	}{
		{"Open(dir, nil)", nil},
		{"Open as a command does", &Options{Logger: testLogger(t)}},
	} {
		h, err := Open(home, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		syncs(t, c.how, h.db)
		h.Close()
	}
	h, err := Open(home, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if !h.db.NoSync {
		t.Error("Open with NoSync: fsync still on (the option does not reach bbolt, so the checks above prove nothing)")
	}
	h.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan *Host, 1)
	opts := DaemonOptions{Listen: "127.0.0.1:0", RelayWait: -1,
		Options: &Options{Logger: testLogger(t), HTTPClient: &http.Client{Timeout: 10 * time.Second}},
		Ready:   func(h *Host) { ready <- h }}
	go func() { done <- RunDaemon(ctx, home, opts) }()
	select {
	case h := <-ready:
		syncs(t, "RunDaemon", h.db)
	case err := <-done:
		t.Fatalf("daemon exited: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("daemon stopped with %v", err)
	}
}
