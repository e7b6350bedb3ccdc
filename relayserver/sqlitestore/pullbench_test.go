package sqlitestore

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// BenchmarkPullWires500 reads 500-item pages (about 600-byte wires, one sender) from the front of
// a queue 1,000 deep: the store's share of a pull. b.N counts pages.
func BenchmarkPullWires500(b *testing.B) {
	s, err := Open(ctx, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	wire := strings.Repeat("w", 600)
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		for i := range 1000 {
			if _, err := tx.InsertItem(item(key(1), key(2), fmt.Sprint("id-", i), wire, int64(1000+i))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	var buf relayserver.PullBuf
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		p, err := s.PullWires(ctx, key(1), 0, 500, 1<<30, &buf)
		if err != nil || len(p.Items) != 500 {
			b.Fatal(len(p.Items), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(500*b.N), "µs/item")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(500*b.N), "cpu-µs/item")
}

// cpuTime is the CPU this process used so far (user and system): a machine shared with other
// work stretches wall time far more than it does CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
