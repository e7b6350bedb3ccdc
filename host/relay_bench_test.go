package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// TestRelayLatency measures end-to-end latency through the relay on loopback: from just before
// host A's Send to the moment the message shows in host B's mailbox (B's agent waits with Wait),
// for 1,000 messages sent at a steady pace, with and without long polling. Two in-process daemons
// with no LAN route between them, the real relay (SQLite, fsync) in-process, real clocks. It is a
// measurement, not a test: it runs only with MBX_BENCH=1 and asserts nothing about time.
//
//	MBX_BENCH=1 go test ./host -run TestRelayLatency -v
//
// MBX_BENCH_N (default 1000), MBX_BENCH_EVERY (default 20ms, the pause between sends) and
// MBX_BENCH_TICK (default the daemon's 5s: the receiver's pause between pulls without long
// polling) tune it.
func TestRelayLatency(t *testing.T) {
	if os.Getenv("MBX_BENCH") != "1" {
		t.Skip("a measurement: set MBX_BENCH=1 to run it")
	}
	n := envInt(t, "MBX_BENCH_N", 1000)
	every := envDuration(t, "MBX_BENCH_EVERY", 20*time.Millisecond)
	tick := envDuration(t, "MBX_BENCH_TICK", DefaultTick)
	for _, mode := range []struct {
		name string
		wait time.Duration
	}{{"without long polling", -1}, {"with long polling", DefaultRelayWait}} {
		t.Run(mode.name, func(t *testing.T) {
			lat := relayLatency(t, n, every, tick, mode.wait)
			slices.Sort(lat)
			q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			t.Logf("%s: %d messages, one every %s, receiver tick %s: p50 %s, p90 %s, p99 %s, max %s, mean %s",
				mode.name, len(lat), every, tick, q(0.50).Round(time.Millisecond), q(0.90).Round(time.Millisecond),
				q(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), (sum / time.Duration(len(lat))).Round(time.Millisecond))
		})
	}
}

func relayLatency(t *testing.T, n int, every, tick, wait time.Duration) []time.Duration {
	url, key := startRelay(t)
	ds := map[string]*daemon{}
	for _, name := range []string{"alpha", "beta"} {
		home := filepath.Join(t.TempDir(), name)
		if err := Init(home, InitOptions{Host: name}); err != nil {
			t.Fatal(err)
		}
		ds[name] = runDaemonOpts(t, home, name, DaemonOptions{Tick: tick, RelayWait: wait})
	}
	a, b := ds["alpha"], ds["beta"]
	for _, p := range []struct{ d, peer *daemon }{{a, b}, {b, a}} {
		rec := p.peer.record(t)
		rec.Addr = ""
		if err := p.d.h.PinPeer(rec); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for _, d := range ds {
		if _, err := d.h.Relay().RelaySet(ctx, api.RelaySetRequest{URL: url, Key: key.Fingerprint()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "enrolment", func() bool {
		for _, d := range ds {
			st, err := d.h.Relay().RelayStatus(ctx)
			if err != nil || !st.Enrolled || st.Senders != 1 {
				return false
			}
		}
		return true
	})
	if _, err := b.h.AddAgent(ctx, api.Agent{Name: "bob"}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	sent := map[string]time.Time{}
	arrived := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			msgs, err := b.h.mail.Wait(ctx, "bob", time.Minute)
			now := time.Now()
			if err != nil {
				t.Errorf("wait: %v", err)
				return
			}
			mu.Lock()
			for _, m := range msgs {
				if _, ok := arrived[m.ID]; !ok {
					arrived[m.ID] = now
				}
			}
			all := len(arrived) == n
			mu.Unlock()
			for _, m := range msgs {
				if _, err := b.h.mail.Read(ctx, api.ReadRequest{ID: m.ID, Agent: "bob"}); err != nil {
					t.Errorf("read: %v", err)
					return
				}
			}
			if all {
				return
			}
		}
	}()
	for i := range n {
		start := time.Now()
		res, err := a.h.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta"}, Subject: "latency " + strconv.Itoa(i), Body: "ping"})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		sent[res.ID] = start
		mu.Unlock()
		time.Sleep(every)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("not every message arrived")
	}
	out := make([]time.Duration, 0, n)
	for id, at := range sent {
		got, ok := arrived[id]
		if !ok {
			t.Fatalf("message %s never arrived", id)
		}
		out = append(out, got.Sub(at))
	}
	return out
}

func envInt(t *testing.T, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: %v", name, s, fmt.Errorf("want a positive integer"))
		}
		return v
	}
	return def
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if s := os.Getenv(name); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			t.Fatalf("%s=%q: want a duration", name, s)
		}
		return v
	}
	return def
}
