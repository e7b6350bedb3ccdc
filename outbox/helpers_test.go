package outbox

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

// t0 is the tests' starting time.
var t0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

func newClock() *testkit.Clock { return testkit.NewClock(t0) }

// openDB opens a bbolt file in a temporary directory. sync=false skips fsync (unit tests).
func openDB(t testing.TB, sync bool) *bbolt.DB {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "host.db"), 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("bbolt open: %v", err)
	}
	db.NoSync = !sync
	if !sync {
		db.MaxBatchDelay = 0 // Store.Add batches; unit tests have one writer and nothing to wait for
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openTest(t testing.TB) (*Store, *testkit.Clock) {
	t.Helper()
	clk := newClock()
	// Jitter off: these tests check the schedule to the millisecond; jitter_test.go checks
	// the jitter.
	s, err := Open(openDB(t, false), &Options{Clock: clk.Now, Jitter: noJitter})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, clk
}

// testKey returns a deterministic valid host key.
func testKey(i int) string {
	b := make([]byte, 32)
	for j := range b {
		b[j] = byte(i*31 + j)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func envRow(id, host string) NewRow {
	return NewRow{
		Kind: KindEnvelope, ItemID: id, Host: host, HostKey: testKey(len(host)),
		Wire:  []byte(fmt.Sprintf(`{"v":3,"id":%q,"to":"x@%s","enc":{"body":"c2VhbGVk"}}`, id, host)),
		Agent: "alice", Subject: "hello " + host,
	}
}

func receiptRow(msg, host string) NewRow {
	return NewRow{
		Kind: KindReceipt, ItemID: "receipt:" + msg + ":bob@" + host + ":1", Host: host, HostKey: testKey(7),
		Wire: []byte(`{"rec":{"v":1},"sig":"x"}`),
	}
}

func acceptance(at time.Time, epoch string, seq int64) Acceptance {
	return Acceptance{
		Relay: "https://relay.example", Epoch: epoch, Seq: seq,
		Statement: []byte(fmt.Sprintf(`{"epoch":%q,"seq":%d,"type":"relay-accept"}`, epoch, seq)),
		Sig:       "c2ln", AcceptedAt: at, Retention: 14 * 24 * time.Hour,
	}
}

func mustAdd(t testing.TB, s *Store, rows ...NewRow) []Row {
	t.Helper()
	out, err := s.Add(context.Background(), rows...)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return out
}

func mustCheck(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func mustGet(t testing.TB, s *Store, k Key) Row {
	t.Helper()
	r, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	return r
}

func keysOf(rows []Row) []Key {
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = r.Key()
	}
	return out
}

// noJitter is the draw that scales a backoff by exactly 1.
func noJitter() float64 { return 0.5 }
