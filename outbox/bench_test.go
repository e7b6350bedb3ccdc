package outbox

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// sqliteDuePassNS is 0.5.x's SQLite outbox due query at 100,000 rows (median), for comparison.
const sqliteDuePassNS = 18.7e6

// benchWire is a sealed-envelope-sized wire value.
var benchWire = func() []byte {
	b := make([]byte, 1200)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

// BenchmarkDuePass: 100,000 pending rows, of which 100 are due and 99,900 wait in backoff; one
// pass is a read transaction returning the 100 due rows with their wire bytes.
func BenchmarkDuePass(b *testing.B) {
	const total, due = 100_000, 100
	clk := newClock()
	db := openDB(b, false)
	db.NoGrowSync = true // setup only; the pass is a read transaction
	s, err := Open(db, &Options{Clock: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	hosts := []string{"alpha", "beta", "gamma", "delta", "epsilon"}
	const chunk = 10_000
	for start := 0; start < total; start += chunk {
		err := db.Update(func(tx *bbolt.Tx) error {
			ob := s.In(tx)
			for i := start; i < start+chunk; i++ {
				n := NewRow{Kind: KindEnvelope, ItemID: fmt.Sprintf("01J%023d", i), Host: hosts[i%len(hosts)],
					HostKey: testKey(i % len(hosts)), Wire: benchWire, Agent: "alice", Subject: "bench"}
				if _, err := ob.Add(n); err != nil {
					return err
				}
				if i%(total/due) == 0 {
					continue // stays due
				}
				// 1 to 3 failures: next_at 5 s, 10 s or 20 s ahead (the clock stands still).
				for range 1 + i%3 {
					if _, err := ob.MarkAttemptFailed(n.Key(), TransportLAN, errors.New("connection refused")); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		err := db.View(func(tx *bbolt.Tx) error {
			rows, err := s.In(tx).Due(0)
			if err != nil {
				return err
			}
			if len(rows) != due {
				return fmt.Errorf("pass found %d due rows, want %d", len(rows), due)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(sqliteDuePassNS/nsPerOp, "x_faster_than_0.5_sqlite")
}

// BenchmarkEnqueueConcurrent: 32 goroutines add rows, each answered only after its commit and
// fsync. "batch" goes through Store.Add (bbolt Batch: concurrent adds share a commit) with bbolt's
// default MaxBatchDelay (10 ms); "batch-2ms" with MaxBatchDelay 2 ms; "update" runs one
// db.Update per row.
func BenchmarkEnqueueConcurrent(b *testing.B) {
	for _, mode := range []string{"batch", "batch-2ms", "update"} {
		b.Run(mode, func(b *testing.B) {
			db := openDB(b, true)
			if mode == "batch-2ms" {
				db.MaxBatchDelay = 2 * time.Millisecond
			}
			s, err := Open(db, nil)
			if err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			next := func() NewRow {
				i := seq.Add(1)
				return NewRow{Kind: KindEnvelope, ItemID: fmt.Sprintf("01J%023d", i), Host: "peer",
					HostKey: testKey(1), Wire: benchWire, Agent: "alice", Subject: "bench"}
			}
			b.SetParallelism((32 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next()
					var err error
					if mode != "update" {
						_, err = s.Add(ctx, n)
					} else {
						err = db.Update(func(tx *bbolt.Tx) error { _, err := s.In(tx).Add(n); return err })
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
		})
	}
}
