package relayserver_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// logBuf is a concurrency-safe log sink for assertions on log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func modeOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// Finding 5: an existing store directory open to others is tightened to 0700 with a log line,
// and relay.db, -wal and -shm are 0600, also when an older store left them wider.
func TestStoreFileModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755) // whatever the umask
	var log logBuf
	open := func() *sqlitestore.Store {
		st, err := sqlitestore.Open(bg, dir, &sqlitestore.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	if err := st.Heartbeat(bg, time.Now()); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, dir); m != 0o700 {
		t.Fatalf("store dir mode = %v, want 0700", m)
	}
	if !strings.Contains(log.String(), "tightened to 0700") {
		t.Fatalf("no log line for the tightened directory: %q", log.String())
	}
	db := filepath.Join(dir, sqlitestore.DBFile)
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if m := modeOf(t, p); m != 0o600 {
			t.Fatalf("%s mode = %v, want 0600", filepath.Base(p), m)
		}
	}
	st.Close()
	// A store an older binary left 0644 is tightened when opened.
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		_ = os.Chmod(p, 0o644)
	}
	st = open()
	defer st.Close()
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if _, err := os.Stat(p); err == nil {
			if m := modeOf(t, p); m != 0o600 {
				t.Fatalf("reopened %s mode = %v, want 0600", filepath.Base(p), m)
			}
		}
	}
}

// Finding 5: a relay.key that group or others may read is refused, naming the fix, and Serve
// does not start on it.
func TestReadableRelayKeyRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	none := func(string) string { return "" }
	if _, _, err := relayserver.LoadKey(dir, none, seeded(1)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, relayserver.KeyFile)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := relayserver.LoadKey(dir, none, seeded(2))
		if !errors.Is(err, relayserver.ErrKeyFileMode) || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("relay.key mode %v: err = %v, want ErrKeyFileMode naming chmod 600", mode, err)
		}
	}
	err := relayserver.Serve(bg, relayserver.ServeConfig{StoreDir: dir, Listen: "127.0.0.1:0", Getenv: none,
		Open: func(ctx context.Context, dir string) (relayserver.Store, error) {
			return sqlitestore.Open(ctx, dir, nil)
		}})
	if !errors.Is(err, relayserver.ErrKeyFileMode) {
		t.Fatalf("serve with a readable relay.key = %v, want ErrKeyFileMode", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, src, err := relayserver.LoadKey(dir, none, seeded(2)); err != nil || src != relayserver.KeyFromFile {
		t.Fatalf("after chmod 600: %v, %v", src, err)
	}
}

// Finding 5: a restore over a damaged store keeps the store's -wal and -shm beside
// relay.db.pre-restore, byte for byte, instead of deleting them; the restored store opens clean.
func TestRestoreKeepsTheReplacedWAL(t *testing.T) {
	t.Parallel()
	r := newRelay(t, nil)
	r.enrol(newHost(t, "alpha", 1))
	backup := filepath.Join(t.TempDir(), "b.db")
	if _, err := sqlitestore.Backup(bg, r.dir, backup); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, sqlitestore.DBFile)
	wal, shm := []byte("committed frames of a damaged store"), []byte("its shared memory")
	for p, b := range map[string][]byte{db: []byte("not a database, damaged"), db + "-wal": wal, db + "-shm": shm} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	res, err := sqlitestore.Restore(bg, dir, backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Warning == "" || res.Kept != db+".pre-restore" {
		t.Fatalf("restore over a damaged store = %+v, want a warning and the kept copy", res)
	}
	for p, want := range map[string][]byte{res.Kept + "-wal": wal, res.Kept + "-shm": shm} {
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s = %q, %v; want the replaced store's file", filepath.Base(p), got, err)
		}
	}
	st, err := sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatalf("restored store: %v", err)
	}
	defer st.Close()
	if _, err := st.Enrolment(bg, newHost(t, "alpha", 1).pub()); err != nil {
		t.Fatalf("restored store lacks the backup's enrolment: %v", err)
	}
}
