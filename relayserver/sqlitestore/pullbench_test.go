package sqlitestore

import (
	"fmt"
	"strings"
	"testing"

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
	for b.Loop() {
		p, err := s.PullWires(ctx, key(1), 0, 500, 1<<30, &buf)
		if err != nil || len(p.Items) != 500 {
			b.Fatal(len(p.Items), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(500*b.N), "µs/item")
}
