package sqlitestore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// BenchmarkCommitSmall is the cost of one durable commit that changes one row (the fsync floor).
// Each heartbeat differs from the last: SQLite writes nothing for a row rewritten unchanged.
func BenchmarkCommitSmall(b *testing.B) {
	s, err := Open(ctx, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for n := range b.N {
		if err := s.Heartbeat(ctx, t0Bench.Add(time.Duration(n+1)*time.Millisecond)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInsert200 inserts 200 items, each in its own unit, in one Update.
func BenchmarkInsert200(b *testing.B) {
	s, err := Open(ctx, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for n := range b.N {
		err := s.Update(ctx, func(tx relayserver.Tx) error {
			for i := range 200 {
				if err := tx.Unit(func(tx relayserver.Tx) error {
					_, err := tx.InsertItem(item(key(1), key(2), fmt.Sprintf("%d-%d", n, i), "wire-bytes-of-some-length-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1000))
					return err
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(200*b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkConcurrentUnits runs single-insert units from 64 goroutines, with group commit and with
// one commit per unit. The slowdisk runs add 2 ms before every COMMIT, standing in for a disk
// whose fsync takes that long (this machine's virtual disk syncs in about 0.1 to 0.3 ms).
func BenchmarkConcurrentUnits(b *testing.B) {
	for _, c := range []struct {
		g    int
		slow time.Duration
	}{{512, 0}, {1, 0}, {512, 2 * time.Millisecond}, {1, 2 * time.Millisecond}} {
		name := fmt.Sprintf("maxgroup=%d", c.g)
		if c.slow > 0 {
			name += "/slowdisk"
		}
		b.Run(name, func(b *testing.B) {
			s, err := Open(ctx, b.TempDir(), &Options{MaxGroup: c.g})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if c.slow > 0 {
				s.w.beforeCommit = func(int) error { time.Sleep(c.slow); return nil }
			}
			st0 := s.Stats()
			var next atomic.Int64
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					err := s.Update(ctx, func(tx relayserver.Tx) error {
						_, err := tx.InsertItem(item(key(int(n%8)), key(2), fmt.Sprint(n), "wire-bytes-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1000))
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
			st := s.Stats()
			b.ReportMetric(float64(st.Units-st0.Units)/float64(max(st.Commits-st0.Commits, 1)), "units/commit")
		})
	}
}
