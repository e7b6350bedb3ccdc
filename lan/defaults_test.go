package lan_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/outbox"
)

// The LAN server's documented defaults (docs/security.md, "A relay on the open internet": a
// host's LAN server "serves at most 64 connections at once with 16 MiB of bodies in flight";
// POST /v1/rotate "takes at most 2 calls a second (burst 10) from all callers together"), each
// checked on a server built with no bounds set, as the daemon builds it (host/lan.go sets only
// the clock, the logger and the version). The values are written here as the docs state them,
// not taken from the package's constants.
const (
	docMaxConns      = 64
	docBodyBudget    = 16 << 20
	docRotatePerSec  = 2
	docRotationBurst = 10
)

func TestLANDefaultConnectionLimit(t *testing.T) {
	srv := lan.NewServer(&fakeHost{me: key(t, 1), alpha: key(t, 2)},
		lan.ServerOptions{Logger: slog.New(slog.DiscardHandler), Version: "test"})
	if held, taken := servedAtOnce(t, srv, docMaxConns+16); held != docMaxConns || taken != docMaxConns+1 {
		t.Fatalf("held %d connections at once and took %d in all, want %d and %d (documented: at most %d at once)",
			held, taken, docMaxConns, docMaxConns+1, docMaxConns)
	}
}

// The body budget, to the byte: large bodies (here 1 MiB each) may hold 7/8 of it, so 14 fit
// and a 15th is refused unread; small ones (64 KiB) take the rest, 32 of them, and a 33rd is
// refused. Only a budget of exactly 16 MiB answers so.
func TestLANDefaultBodyBudget(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{})
	const large, small = 1 << 20, 64 << 10
	holdUntil := func(n, length int, inUse int64) {
		t.Helper()
		for range n {
			w.hold("alpha", t0, length)
		}
		waitInUse(t, w, inUse)
	}
	largeFit := docBodyBudget * 7 / 8 / large
	holdUntil(largeFit, large, int64(largeFit*large))
	if c, br := w.hold("alpha", t0, large); answer(t, c, br) != http.StatusServiceUnavailable {
		t.Fatalf("large body %d past 7/8 of the budget: not refused", largeFit+1)
	}
	smallFit := (docBodyBudget - largeFit*large) / small
	holdUntil(smallFit, small, docBodyBudget)
	if c, br := w.hold("alpha", t0, small); answer(t, c, br) != http.StatusServiceUnavailable {
		t.Fatalf("a small body past the full budget (%d bytes held): not refused", w.srv.BodyBytesInFlight())
	}
}

// waitInUse waits until the server's body budget holds n bytes (its handlers run on other
// goroutines), failing after a generous bound.
func waitInUse(t *testing.T, w *lanWorld, n int64) {
	t.Helper()
	for range 3000 {
		if w.srv.BodyBytesInFlight() == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the budget never held %d bytes (holds %d)", n, w.srv.BodyBytesInFlight())
}

// POST /v1/rotate on the injected clock: a burst of 10, then 2 a second.
func TestLANDefaultRotationRate(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{})
	a := &countingApplier{}
	w.srv.HandleRotations(a)
	post := func() int {
		resp, err := http.Post("http://"+w.addr+lan.PathLANRotate, "application/json", strings.NewReader(`{"rotation":{"rec":{}}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// calls posts until one is refused and returns how many reached the applier.
	calls := func() int {
		t.Helper()
		before := a.calls.Load()
		for range 100 {
			if post() == http.StatusTooManyRequests {
				return int(a.calls.Load() - before)
			}
		}
		t.Fatal("100 rotation calls, none refused")
		return 0
	}
	if n := calls(); n != docRotationBurst {
		t.Fatalf("%d calls before the first 429, want the burst of %d", n, docRotationBurst)
	}
	w.clock.Advance(time.Second)
	if n := calls(); n != docRotatePerSec {
		t.Fatalf("%d calls a second later, want %d", n, docRotatePerSec)
	}
	w.clock.Advance(time.Hour)
	if n := calls(); n != docRotationBurst {
		t.Fatalf("%d calls after an hour idle, want the burst of %d (no more)", n, docRotationBurst)
	}
}

// probeDoer records when each probe was made (on the bubble's clock) and fails it.
type probeDoer struct {
	mu sync.Mutex
	at []time.Time
}

func (d *probeDoer) Do(*http.Request) (*http.Response, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = append(d.at, time.Now())
	return nil, errors.New("no answer")
}

// The probes of a silent peer (docs/relay.md, "What hosts do with a relay": "probed, 5 s
// doubling to 15 s"; the package doc: each wait jittered ±20%), on the default schedule, in
// simulated time: the waits between probes lie within 20% of 5 s, 10 s, then 15 s every time.
func TestLANDefaultProbeSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		doer := &probeDoer{}
		start := time.Now()
		p := lan.NewProber(lan.ProberConfig{
			Transport: lan.NewTransport(lan.TransportConfig{Identity: &fakeHost{me: keyN(1)}, HTTPClient: doer, Clock: time.Now}),
			Peer: func(string) (outbox.Peer, bool, error) {
				return outbox.Peer{Host: "beta", HostPubkey: keyN(2).PublicKey(), Addr: "192.0.2.7:7373"}, true, nil
			},
			Up:       func(string) bool { return false },
			Answered: func(context.Context, string) { t.Error("a failed probe counted as an answer") },
			Clock:    time.Now, Logger: slog.New(slog.DiscardHandler),
		})
		ctx, cancel := context.WithCancel(context.Background())
		p.Start(ctx)
		p.Silent("beta")
		time.Sleep(10 * time.Minute)
		cancel()
		p.Stop()
		want := []time.Duration{5 * time.Second, 10 * time.Second} // then 15 s
		prev := start
		if len(doer.at) < 10 {
			t.Fatalf("%d probes in 10 minutes", len(doer.at))
		}
		for i, at := range doer.at {
			center := 15 * time.Second
			if i < len(want) {
				center = want[i]
			}
			if wait := at.Sub(prev); wait < center*8/10 || wait > center*12/10 {
				t.Fatalf("wait %d before probe %d = %s, want %s ±20%% (waits: %v)", i+1, i+1, wait, center, waits(start, doer.at))
			}
			prev = at
		}
	})
}

func waits(start time.Time, at []time.Time) []time.Duration {
	var out []time.Duration
	for _, a := range at {
		out = append(out, a.Sub(start))
		start = a
	}
	return out
}
