package host

import (
	"context"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/outbox"
)

// TestLANProbeFlushesWhenThePeerAnswers: a peer whose LAN address stopped answering leaves its
// rows in backoff (the fake clock never moves to their next_at), however many probes find nothing;
// the peer's return is noticed by a probe and its rows become due at once, then delivered.
// Cost: well under a second (the probes' wait is shortened).
func TestLANProbeFlushesWhenThePeerAnswers(t *testing.T) {
	saved := probeEvery
	probeEvery = 20 * time.Millisecond
	t.Cleanup(func() { probeEvery = saved })

	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx, cancel := context.WithCancel(context.Background())
	a.probes.Start(ctx)
	t.Cleanup(func() { cancel(); a.probes.Stop() })

	b.gate.setMute(true) // beta's address takes connections and closes them without an answer
	m := a.send("alice", []string{"bob@beta"}, "while away", "waits")
	for i := range 4 {
		if n, err := a.pass(ctx, true); err != nil || n != 1 {
			t.Fatalf("pass %d sent %d, %v; want 1", i, n, err)
		}
		if i < 3 {
			clock.Advance(outbox.LatestBackoff(i))
		}
	}
	r := a.row(m.ID, "beta")
	if r.State != outbox.StatePending || r.Attempts != 4 || !r.NextAt.After(clock.Now().Add(30*time.Second)) {
		t.Fatalf("row = %s, %d attempts, next_at %v (now %v); want pending, 4 attempts, in backoff", r.State, r.Attempts, r.NextAt, clock.Now())
	}
	if st := a.reach.Get(reach.LAN("beta")); st.State != reach.Down {
		t.Fatalf("beta's LAN address is %v after four unanswered attempts, want down", st.State)
	}
	// Three probes reach beta's address and get no answer: the row stays in its backoff.
	probed := b.gate.requests()
	for deadline := time.Now().Add(30 * time.Second); b.gate.requests() < probed+3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes of beta's address in 30 s, want 3", b.gate.requests()-probed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := a.row(m.ID, "beta"); !r.NextAt.After(clock.Now()) {
		t.Fatalf("the row became due while beta was still away: next_at %v", r.NextAt)
	}

	b.gate.setMute(false)
	deadline := time.Now().Add(30 * time.Second)
	for a.row(m.ID, "beta").NextAt.After(clock.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("beta answers again, but no probe made its rows due")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := a.pass(ctx, true); err != nil || n != 1 {
		t.Fatalf("pass after the probe sent %d, %v; want 1", n, err)
	}
	if r := a.row(m.ID, "beta"); r.State != outbox.StateDone {
		t.Fatalf("row = %s, want done", r.State)
	}
	if got := len(b.inbox("bob", true)); got != 1 {
		t.Fatalf("bob has %d messages, want 1", got)
	}
}
