package sqlitestore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/agentmbx/agentmbx/relayserver"
)

// BenchmarkCommitEmpty is the cost of one durable commit (the fsync floor).
func BenchmarkCommitEmpty(b *testing.B) {
	s, err := Open(ctx, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for range b.N {
		if err := s.Heartbeat(ctx, t0Bench); err != nil {
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
// one commit per unit.
func BenchmarkConcurrentUnits(b *testing.B) {
	for _, g := range []int{512, 1} {
		b.Run(fmt.Sprintf("maxgroup=%d", g), func(b *testing.B) {
			s, err := Open(ctx, b.TempDir(), &Options{MaxGroup: g})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
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
		})
	}
}
