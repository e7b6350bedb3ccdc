package relayserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// headed is an answer with its headers.
type headed struct {
	code int
	hdr  http.Header
	body []byte
	err  error
}

// callHeaders is callURL that also returns the answer's headers.
func callHeaders(ctx context.Context, base string, h *host, now time.Time, method, path string, body []byte) headed {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return headed{err: err}
	}
	if h != nil {
		for k, v := range mbx.SignRelayHop(h.key, h.name, method, mbx.RelaySignedPath(req.URL), body, now, true) {
			req.Header[k] = v
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return headed{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return headed{code: resp.StatusCode, hdr: resp.Header, body: b, err: err}
}

// TestLongPollRetryHints: a long poll the relay cannot hold (its parked polls are full) gets an
// empty page at once with Retry-After: 10; a parked poll answered because the relay shuts down
// gets Retry-After: 5; a poll answered with items, or after its whole wait, gets none.
func TestLongPollRetryHints(t *testing.T) {
	t.Parallel()
	r, tm, a, b, g := longPollRelay(t, func(o *relayserver.Options) { o.MaxWaiting = 1 })
	parked := make(chan headed, 1)
	go func() {
		parked <- callHeaders(bg, r.ts.URL, &b, r.clock.Now(), "GET", "/v2/relay/items?after=0&wait=30", nil)
	}()
	ft := tm.parked(t)
	full := callHeaders(bg, r.ts.URL, &g, r.clock.Now(), "GET", "/v2/relay/items?after=0&wait=30", nil)
	if full.err != nil || full.code != 200 || full.hdr.Get("Retry-After") != "10" {
		t.Fatalf("poll over the cap = %d %v %s (Retry-After %q), want 200 with Retry-After 10", full.code, full.err, full.body, full.hdr.Get("Retry-After"))
	}
	if p := decode[mbx.PullResponse](t, full.body); len(p.Items) != 0 {
		t.Fatalf("poll over the cap = %s, want an empty page", full.body)
	}
	tm.none(t)
	// The parked poll's wait passes: an empty page without a hint.
	ft.fire()
	if got := <-parked; got.err != nil || got.code != 200 || got.hdr.Get("Retry-After") != "" {
		t.Fatalf("poll whose wait passed = %d %v (Retry-After %q), want 200 without a hint", got.code, got.err, got.hdr.Get("Retry-After"))
	}
	// Woken by an item: no hint.
	go func() {
		parked <- callHeaders(bg, r.ts.URL, &b, r.clock.Now(), "GET", "/v2/relay/items?after=0&wait=30", nil)
	}()
	tm.parked(t)
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0H1", b))
	if got := <-parked; got.err != nil || got.code != 200 || got.hdr.Get("Retry-After") != "" {
		t.Fatalf("poll woken by an item = %d %v (Retry-After %q)", got.code, got.err, got.hdr.Get("Retry-After"))
	}
	// Parked when the relay shuts down: an empty page at once with Retry-After: 5.
	go func() {
		parked <- callHeaders(bg, r.ts.URL, &g, r.clock.Now(), "GET", "/v2/relay/items?after=0&wait=30", nil)
	}()
	tm.parked(t)
	r.srv.Shutdown()
	if got := <-parked; got.err != nil || got.code != 200 || got.hdr.Get("Retry-After") != "5" {
		t.Fatalf("poll answered at shutdown = %d %v (Retry-After %q), want 200 with Retry-After 5", got.code, got.err, got.hdr.Get("Retry-After"))
	}
}
