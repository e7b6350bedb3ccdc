package host

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

// BenchmarkSend32 measures Send with 32 concurrent senders, each answered only after its
// transaction is fsynced (bbolt's Batch lets concurrent sends share a commit). Every message goes
// to a peer (sealed, one outbox row) and to a local agent.
func BenchmarkSend32(b *testing.B) {
	for _, bc := range []struct {
		name string
		to   []string
	}{
		{"remote", []string{"bob@beta"}},
		{"remote+local", []string{"bob@beta", "ann@alpha"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clock := testkit.NewClock(time.Now())
			a := newBenchHost(b, "alpha", clock)
			peer := newBenchHost(b, "beta", clock)
			if err := a.PinPeer(PeerRecord{Host: "beta", HostPubkey: peer.Key().PublicKey(), EncPub: peer.EncKey().PublicKey(), Addr: "127.0.0.1:9"}); err != nil {
				b.Fatal(err)
			}
			const senders = 32
			var next atomic.Int64
			var wg sync.WaitGroup
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := a.Send(ctx, api.SendRequest{From: "alice", To: bc.to, Subject: "bench", Body: "a short message body"}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sends/s")
		})
	}
}

func newBenchHost(b *testing.B, name string, clock *testkit.Clock) *Host {
	b.Helper()
	dir := b.TempDir()
	if err := Init(dir, InitOptions{Host: name}); err != nil {
		b.Fatal(err)
	}
	h, err := Open(dir, &Options{Clock: clock.Now, Logger: testLoggerB()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return h
}
