package lan_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"

	"github.com/agentmbx/agentmbx/lan"
)

// TestProberCallsAnsweredWhenThePinnedPeerAnswers: a silent peer is probed until its address
// answers as the pinned host (an answer with another key does not count), then Answered is
// called once and the probe ends; a second Silent while it runs starts no second probe.
func TestProberCallsAnsweredWhenThePinnedPeerAnswers(t *testing.T) {
	peerKey := keyN(2)
	var asked, other atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != mbx.PathLANStatus {
			http.NotFound(w, r)
			return
		}
		st := mbx.LANStatus{Host: "beta", HostPubkey: peerKey.PublicKey()}
		if asked.Add(1) <= 2 {
			other.Add(1)
			st.HostPubkey = keyN(9).PublicKey() // someone else on the address first
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	peer := outbox.Peer{Host: "beta", HostPubkey: peerKey.PublicKey(), Addr: strings.TrimPrefix(srv.URL, "http://")}
	answered := make(chan string, 2)
	p := lan.NewProber(lan.ProberConfig{
		Transport: lan.NewTransport(lan.TransportConfig{Identity: &fakeHost{me: keyN(1)}, HTTPClient: srv.Client(), Clock: time.Now}),
		Peer:      func(string) (outbox.Peer, bool, error) { return peer, true, nil },
		Up:        func(string) bool { return false },
		Answered:  func(_ context.Context, host string) { answered <- host },
		Schedule:  lan.ProbeSchedule{First: 5 * time.Millisecond, Max: 20 * time.Millisecond},
		Clock:     time.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	p.Silent("beta") // before Start: no daemon, no probe
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Start(ctx)
	p.Silent("beta")
	p.Silent("beta")
	select {
	case host := <-answered:
		if host != "beta" {
			t.Fatalf("answered %s", host)
		}
	case <-time.After(time.Minute):
		t.Fatal("the peer answers, but Answered was not called")
	}
	p.Stop()
	if len(answered) != 0 || other.Load() != 2 || asked.Load() != 3 {
		t.Fatalf("%d more answers, %d probes (%d by another key); want one probe loop: 3 asks, 2 refused", len(answered), asked.Load(), other.Load())
	}
}

// TestProberEndsWhenTheLinkIsUpOrThePeerGone: a probe asks nothing once a delivery got through
// (Up) or the peer is no longer pinned.
func TestProberEndsWhenTheLinkIsUpOrThePeerGone(t *testing.T) {
	for name, cfg := range map[string]lan.ProberConfig{
		"up":   {Up: func(string) bool { return true }, Peer: func(string) (outbox.Peer, bool, error) { return outbox.Peer{Addr: "x"}, true, nil }},
		"gone": {Up: func(string) bool { return false }, Peer: func(string) (outbox.Peer, bool, error) { return outbox.Peer{}, false, nil }},
	} {
		t.Run(name, func(t *testing.T) {
			var asked atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { asked.Add(1) }))
			defer srv.Close()
			cfg.Transport = lan.NewTransport(lan.TransportConfig{Identity: &fakeHost{me: keyN(1)}, HTTPClient: srv.Client(), Clock: time.Now})
			cfg.Answered = func(context.Context, string) { t.Error("Answered called") }
			cfg.Schedule = lan.ProbeSchedule{First: time.Millisecond, Max: time.Millisecond}
			cfg.Clock, cfg.Logger = time.Now, slog.New(slog.NewTextHandler(io.Discard, nil))
			p := lan.NewProber(cfg)
			p.Start(context.Background())
			p.Silent("beta")
			p.Stop() // waits for the probe, which ends on its own
			if asked.Load() != 0 {
				t.Fatalf("%d probe requests", asked.Load())
			}
		})
	}
}
