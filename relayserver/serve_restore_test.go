package relayserver_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// TestServeLogsAStartFromARestore: the first start after a restore says so (when, from which
// file, the new epoch); the next start does not.
func TestServeLogsAStartFromARestore(t *testing.T) {
	dir := t.TempDir()
	run := func(now time.Time) string {
		t.Helper()
		var buf testkit.SyncBuffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		ctx, cancel := context.WithCancel(bg)
		cfg := serveConfig(dir, keyFor(t, 7), now, log)
		cfg.Ready = func(string) { cancel() }
		if err := relayserver.Serve(ctx, cfg); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		return buf.String()
	}
	if out := run(t0); strings.Contains(out, "restore") {
		t.Fatalf("a fresh store's start speaks of a restore:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "relay-backup.db")
	if _, err := sqlitestore.Backup(bg, dir, file); err != nil {
		t.Fatal(err)
	}
	res, err := sqlitestore.Restore(bg, dir, file, &sqlitestore.RestoreOptions{Now: func() time.Time { return t0.Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	out := run(t0.Add(2 * time.Minute))
	if !strings.Contains(out, "relay store came up from a restore") || !strings.Contains(out, "backup=relay-backup.db") ||
		!strings.Contains(out, "epoch="+res.Epoch) {
		t.Fatalf("the first start after a restore does not say so:\n%s", out)
	}
	if out := run(t0.Add(3 * time.Minute)); strings.Contains(out, "came up from a restore") {
		t.Fatalf("the second start after a restore still speaks of it:\n%s", out)
	}
}
