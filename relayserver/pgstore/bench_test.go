package pgstore

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

// EnvBenchDeep enables BenchmarkPull500's queue of 1,000,000 items (it takes a minute or more to
// fill).
const EnvBenchDeep = "MBX_PG_BENCH_DEEP"

// BenchmarkCommitSmall is the database's rate of single durable commits that change one row (its
// fsync floor; synchronous_commit = on).
func BenchmarkCommitSmall(b *testing.B) {
	s, _ := openT(b, nil)
	b.ResetTimer()
	for n := range b.N {
		if err := s.Heartbeat(ctx, storetest.T0.Add(time.Duration(n+1)*time.Millisecond)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkPush runs the relay's push unit (admission, then insert) from 64 goroutines on 8
// targets, with group commit and with one commit per unit.
func BenchmarkPush(b *testing.B) {
	for _, g := range []int{512, 1} {
		b.Run(fmt.Sprintf("maxgroup=%d", g), func(b *testing.B) {
			s, _ := openT(b, &Options{MaxGroup: g})
			for i := range 8 {
				if err := s.Update(ctx, func(tx relayserver.Tx) error {
					return tx.PutEnrolment(relayserver.Enrolment{HostPubkey: storetest.Key(i), HostName: fmt.Sprint("t", i),
						AuthorizedBy: "host-key", EnrolledAt: storetest.T0})
				}); err != nil {
					b.Fatal(err)
				}
			}
			st0 := s.Stats()
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					it := storetest.NewItem(storetest.Key(int(n%8)), storetest.Key(100+int(n%64)), fmt.Sprint(n),
						"wire-bytes-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", storetest.T0.UnixMilli())
					if _, err := pushUnit(s, it); err != nil {
						b.Error(err)
						return
					}
				}
			})
			st := s.Stats()
			commits := max(st.Commits-st0.Commits, 1)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
			b.ReportMetric(float64(commits)/b.Elapsed().Seconds(), "commits/s")
			b.ReportMetric(float64(st.Units-st0.Units)/float64(commits), "units/commit")
		})
	}
}

// BenchmarkPull500 pulls a 500-item page (200-byte wires) from a queue 1,000 items deep, and
// 1,000,000 deep with MBX_PG_BENCH_DEEP=1.
func BenchmarkPull500(b *testing.B) {
	for _, depth := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			if depth > 1_000 && os.Getenv(EnvBenchDeep) == "" {
				b.Skipf("set %s=1 to fill a queue of %d items", EnvBenchDeep, depth)
			}
			s, _ := openT(b, nil)
			tgt := storetest.Key(1)
			// Filled in bulk, as the relay would have stored them: items, dedup rows, counters.
			t0, snd := storetest.T0.UnixMilli(), storetest.Key(2)
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO items SELECT $1, $2::bigint + g, 'envelope', 'id-' || g, $3, md5(g::text), 200,
					$2::bigint, $2::bigint + 1209600000, convert_to(repeat('x', 200), 'UTF8')
					FROM generate_series(1, $4::bigint) g`, []any{tgt, t0, snd, depth}},
				{`INSERT INTO dedup SELECT $3, 'id-' || g, $1, md5(g::text), $2::bigint + g, $2::bigint
					FROM generate_series(1, $4::bigint) g`, []any{tgt, t0, snd, depth}},
				{`INSERT INTO seqs VALUES($1, $2::bigint + $3::bigint + 1)`, []any{tgt, t0, depth}},
				{`INSERT INTO usage VALUES($1, '', $3::bigint, 200 * $3::bigint), ($1, $2, $3::bigint, 200 * $3::bigint)`,
					[]any{tgt, snd, depth}},
				{`ANALYZE`, nil},
			} {
				if _, err := s.pool.Exec(ctx, q.sql, q.args...); err != nil {
					b.Fatalf("%s: %v", q.sql, err)
				}
			}
			b.ResetTimer()
			for n := range b.N {
				after := storetest.T0.UnixMilli() + int64(n*500%(depth-500+1))
				p, err := s.Pull(ctx, tgt, after, 500, 1<<30)
				if err != nil || len(p.Items) != 500 {
					b.Fatalf("pull = %d items, %v", len(p.Items), err)
				}
			}
			b.ReportMetric(float64(b.N*500)/b.Elapsed().Seconds(), "items/s")
		})
	}
}
