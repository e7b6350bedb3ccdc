package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
)

// benchDaemon runs a real daemon (fsync on) in a fresh home and returns a client of it.
func benchDaemon(b *testing.B) (*client.Client, string) {
	b.Helper()
	dir, err := os.MkdirTemp("", "mbx")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	home := filepath.Join(dir, "h")
	if err := host.Init(home, host.InitOptions{Host: "desk", Listen: "127.0.0.1:0"}); err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	quiet := &host.Options{Logger: slog.New(slog.DiscardHandler)}
	go func() { done <- host.RunDaemon(ctx, home, host.DaemonOptions{Options: quiet, Tick: time.Hour}) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			b.Errorf("daemon: %v", err)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := client.Dial(ctx, home)
		if err == nil {
			b.Cleanup(func() { c.Close() })
			return c, dir
		}
		if !errors.Is(err, client.ErrNoDaemon) || time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkSend measures sends per second through the SDK with 32 concurrent senders, each
// answered by a real daemon after its commit (fsync) — to a local agent, and to a paired host
// (one outbox row each; the peer is down, so rows stay pending and the loop stays idle).
func BenchmarkSend(b *testing.B) {
	const senders = 32
	for _, tc := range []struct{ name, to string }{{"local", "bob@desk"}, {"remote", "bob@far"}} {
		b.Run(tc.name, func(b *testing.B) {
			c, dir := benchDaemon(b)
			ctx := context.Background()
			if _, err := c.AddAgent(ctx, api.Agent{Name: "bob"}); err != nil {
				b.Fatal(err)
			}
			if tc.name == "remote" {
				far := filepath.Join(dir, "far")
				if err := host.Init(far, host.InitOptions{Host: "far"}); err != nil {
					b.Fatal(err)
				}
				h, err := host.Open(far, &host.Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				card, err := h.Card(context.Background(), "127.0.0.1:9") // discard port: nothing answers
				h.Close()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.AddPeer(ctx, card); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, senders)
			b.ResetTimer()
			for i := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
						_, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{tc.to}, Subject: "bench", Body: fmt.Sprintf("sender %d message %d", i, n)})
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
		})
	}
}
