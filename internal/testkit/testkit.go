// Package testkit holds what the module's tests share: a fake clock, seeded randomness, a
// buffer that several goroutines may write, a bbolt store in a temporary directory, runners for
// child processes (crash drills that SIGKILL a child at a failpoint, and servers that write
// their address to a file). A real relay in process is relayserver/relaytest.
//
// It is imported only by tests. It never sleeps to wait for wall-clock time to pass in what it
// asserts; the waits it has are bounded polls for a child to be ready.
package testkit

import (
	"io"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/syncbuf"
)

// Clock is a clock that moves only when told; it is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that stands at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Rand is a deterministic randomness source: the same seed gives the same bytes. It is not safe
// for concurrent use.
func Rand(seed uint64) io.Reader {
	return rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
}

// SyncBuffer is a bytes.Buffer that several goroutines may write (a logger, a child's output)
// while the test reads it (package internal/syncbuf).
type SyncBuffer = syncbuf.Buffer

// BoltDB opens a bbolt store in the test's temporary directory with the named buckets made; the
// test's cleanup closes it.
func BoltDB(t testing.TB, buckets ...[]byte) *bbolt.DB {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

// Map applies f to each element of xs, in order (nil for none).
func Map[T, U any](xs []T, f func(T) U) []U {
	var out []U
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}
