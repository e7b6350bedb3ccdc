package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

// BenchmarkProcessPage processes pages of 500 one-KiB items (one transaction and one fsync per
// page) with a handler that stores each item: the receive side's throughput.
func BenchmarkProcessPage(b *testing.B) {
	db, err := bbolt.Open(filepath.Join(b.TempDir(), "state.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	q, _ := quarantine.Open(db, nil)
	s, err := Open(db, q, &Options{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	h := &mailbox{}
	wire := mbx.B64(make([]byte, 1024))
	const pageSize = 500
	seq := int64(0)
	b.ResetTimer()
	for b.Loop() {
		p := mbx.PullResponse{Epoch: "ep1", Items: make([]mbx.PullItem, pageSize)}
		after := seq
		for i := range p.Items {
			seq++
			p.Items[i] = mbx.PullItem{Seq: seq, Kind: mbx.ItemKindEnvelope, ItemID: fmt.Sprint(seq), SenderPubkey: peerKey, WireB64: wire}
		}
		p.HeadSeq = seq
		if _, err := s.ProcessPage(context.Background(), relayURL, after, p, h); err != nil {
			b.Fatal(err)
		}
		h.calls = h.calls[:0]
	}
	b.ReportMetric(float64(b.N*pageSize)/b.Elapsed().Seconds(), "items/s")
}
