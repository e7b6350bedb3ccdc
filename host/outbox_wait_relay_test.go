package host

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// waitingOf lists a's outbox as a running daemon would (only a daemon sends, so without one
// every row waits for it) and returns the wait reason of msg's row.
func waitingOf(t *testing.T, a *testHost, msg string) string {
	t.Helper()
	a.mu.Lock()
	a.daemon = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.daemon = false
		a.mu.Unlock()
	}()
	p, err := a.OutboxPage(context.Background(), api.OutboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Rows {
		if r.MsgID == msg {
			return r.Waiting
		}
	}
	t.Fatalf("%s not in the outbox page %+v", msg, p.Rows)
	return ""
}

// TestOutboxWaitingOnTheRelay: a row for a relay-only peer says what holds it at the relay: a
// 429 with Retry-After pauses the link, and the row says until when; once a push fails (a 503
// with no Retry-After, past the client's own retries), it says the relay is failing and since when, not the row's last error.
func TestOutboxWaitingOnTheRelay(t *testing.T) {
	a, _, r := relayPair(t, mbx.Limits{})
	r.set(func(r *testRelay) { r.throttle, r.throttleCode, r.retryAfter = 1, http.StatusTooManyRequests, "30" })
	m := a.send("alice", []string{"bob@beta"}, "one", "held")
	a.passOnce()
	end := a.clock.Now().Add(30 * time.Second)
	if w := waitingOf(t, a, m.ID); w != "the relay asked this host to slow down: pushes wait until "+mbx.ISOTime(end)+" (no attempt is counted)" {
		t.Fatalf("paused: waiting = %q", w)
	}

	a.clock.Advance(30 * time.Second)
	failedAt := a.clock.Now()
	r.set(func(r *testRelay) { r.throttle, r.throttleCode, r.retryAfter = 100, http.StatusServiceUnavailable, "" })
	a.passOnce()
	w := waitingOf(t, a, m.ID)
	if !strings.HasPrefix(w, "the relay is failing since "+mbx.ISOTime(failedAt)+" (push: ") || !strings.Contains(w, "503") {
		t.Fatalf("failing: waiting = %q", w)
	}
	if row := a.row(m.ID, "beta"); row.Attempts != 1 {
		t.Fatalf("row after the failed push: %d attempts, want 1", row.Attempts)
	}
}
