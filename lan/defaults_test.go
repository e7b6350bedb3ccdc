package lan_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/lan"
)

// The LAN server's documented defaults (docs/security.md, "A relay on the open internet": a
// host's LAN server "serves at most 64 connections at once with 16 MiB of bodies in flight";
// POST /v1/rotate "takes at most 2 calls a second (burst 10) from each client address"), each
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

// The body budget, charged as bytes arrive: bodies over 64 KiB may hold 7/8 of it. Fourteen
// bodies of 1 MiB, each sent but for its last byte (so each holds its 1 MiB buffer less the first
// 512 bytes, which are not charged), fit; then a body of 128 KiB no longer does. Both together
// bound the budget to between 15.99 and 16.13 MiB.
func TestLANDefaultBodyBudget(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{})
	const large, charged, last = 1 << 20, 1<<20 - 512, 128 << 10
	fit := docBodyBudget * 7 / 8 / large
	for range fit {
		c, _ := w.hold("alpha", t0, large)
		if _, err := c.Write(bytes.Repeat([]byte{' '}, large-1)); err != nil {
			t.Fatal(err)
		}
	}
	held := int64(fit * charged)
	waitInUse(t, w, held)
	c, br := w.hold("alpha", t0, last)
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, _ = c.Write(bytes.Repeat([]byte{' '}, last-1)) // the server may answer and close before the end
	if code := answer(t, c, br); code != http.StatusServiceUnavailable {
		t.Fatalf("a 128 KiB body past 7/8 of the budget (%d held) = %d, want 503", held, code)
	}
	if got := w.srv.BodyBytesInFlight(); got != held {
		t.Fatalf("after the refusal the budget holds %d, want the %d holders' %d", got, fit, held)
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

// POST /v1/rotate on the injected clock: a burst of 10, then 2 a second, from one address.
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
