package sqlitestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// BenchmarkAdmitInsert is the store's share of the relay's 1-item push load: 64 senders at once,
// each unit an Admission and an InsertItem (the relay's storeChecked) for one of 8 targets, with
// real acceptance times. It reports the process CPU per item (the store alone), units per commit,
// and the WAL frames written per item (each a page write; automatic checkpoints are off during
// the run, so the WAL grows by every frame).
func BenchmarkAdmitInsert(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(ctx, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(ctx, func(relayserver.Tx) error {
		_, err := s.w.q.ExecContext(ctx, "PRAGMA wal_autocheckpoint=0")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = s.Update(ctx, func(relayserver.Tx) error {
			_, err := s.w.q.ExecContext(ctx, "PRAGMA wal_autocheckpoint=1000")
			return err
		})
	}()
	for i := range 8 {
		if err := s.Update(ctx, func(tx relayserver.Tx) error {
			return tx.PutEnrolment(relayserver.Enrolment{HostPubkey: key(i), HostName: fmt.Sprint("t", i),
				AuthorizedBy: "host-key", EnrolledAt: t0Bench})
		}); err != nil {
			b.Fatal(err)
		}
	}
	wire := "wire-bytes-" + strings.Repeat("x", 290)
	wal := filepath.Join(dir, DBFile+"-wal")
	wal0, err := os.Stat(wal)
	if err != nil {
		b.Fatal(err)
	}
	st0, cpu0 := s.Stats(), processCPU()
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				tgt, snd, id := key(int(n%8)), key(100+g), fmt.Sprint("s", g, "-", n)
				err := s.Update(ctx, func(tx relayserver.Tx) error {
					a, err := tx.Admission(snd, id, tgt)
					if err != nil || a.Duplicate || !a.Enrolled {
						return errors.Join(err, fmt.Errorf("admission %+v", a))
					}
					_, err = tx.InsertItem(item(tgt, snd, id, wire, time.Now().UnixMilli()))
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu, st := processCPU()-cpu0, s.Stats()
	fi, err := os.Stat(wal)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/item")
	b.ReportMetric(float64(st.Units-st0.Units)/float64(max(st.Commits-st0.Commits, 1)), "units/commit")
	b.ReportMetric(float64(fi.Size()-wal0.Size())/(4096+24)/float64(b.N), "wal-frames/item")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
