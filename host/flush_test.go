package host

import (
	"context"
	"testing"

	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// TestLANRecoveryFlushesWaitingRows: rows for a peer that was down sit in backoff; when a new
// message to it is delivered, they become due at once and the next pass delivers them, with the
// fake clock not moved.
func TestLANRecoveryFlushesWaitingRows(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	c := newTestHost(t, "gamma", clock)
	pairAll(t, a, b, c)
	ctx := context.Background()
	b.gate.setDown(true)
	c.gate.setDown(true)
	m1 := a.send("alice", []string{"bob@beta"}, "one", "while down")
	mc := a.send("alice", []string{"carol@gamma"}, "other peer", "still down")
	for i := range 3 { // three failures each: m1 and mc then wait 20 s
		if n, err := a.pass(ctx, true); err != nil || n != 2 {
			t.Fatalf("pass %d sent %d, %v; want 2", i, n, err)
		}
		if i < 2 {
			clock.Advance(outbox.LatestBackoff(i))
		}
	}
	m2 := a.send("alice", []string{"bob@beta"}, "two", "while down")
	if n, err := a.pass(ctx, true); err != nil || n != 1 {
		t.Fatalf("pass sent %d, %v; want m2 only", n, err)
	}
	b.gate.setDown(false)
	if n, _ := a.pass(ctx, true); n != 0 {
		t.Fatalf("a pass during backoff sent %d rows", n)
	}

	m3 := a.send("alice", []string{"bob@beta"}, "three", "back up")
	if n, err := a.pass(ctx, true); err != nil || n != 1 {
		t.Fatalf("pass sent %d, %v; want m3 only", n, err)
	}
	if r := a.row(m3.ID, "beta"); r.State != outbox.StateDone {
		t.Fatalf("m3 is %s, want done", r.State)
	}
	// beta answered: its waiting rows are due now, gamma's are not.
	if n, err := a.pass(ctx, true); err != nil || n != 2 {
		t.Fatalf("pass after recovery sent %d, %v; want m1 and m2", n, err)
	}
	for _, id := range []string{m1.ID, m2.ID} {
		if r := a.row(id, "beta"); r.State != outbox.StateDone {
			t.Fatalf("%s is %s after the recovery pass, want done", id, r.State)
		}
	}
	if r := a.row(mc.ID, "gamma"); r.State != outbox.StatePending || !r.NextAt.After(clock.Now()) {
		t.Fatalf("gamma's row: %s, next_at %v (now %v); want still waiting", r.State, r.NextAt, clock.Now())
	}
	if got := len(b.inbox("bob", true)); got != 3 {
		t.Fatalf("bob has %d messages, want 3", got)
	}
}

// TestRelayRecoveryFlushesWaitingRows: a push whose answer is lost leaves its row in backoff;
// the next push the relay accepts makes it due at once (clock not moved), and so does a pull
// that succeeds.
func TestRelayRecoveryFlushesWaitingRows(t *testing.T) {
	a, _, r := relayPair(t, mbx.Limits{})
	for _, recover := range []string{"push", "pull"} {
		r.set(func(r *testRelay) { r.dropPushes = lostTries })
		m1 := a.send("alice", []string{"bob@beta"}, "lost", "answer lost")
		if n := a.passOnce(); n != 1 {
			t.Fatalf("%s: pass sent %d, want 1", recover, n)
		}
		if row := a.row(m1.ID, "beta"); row.State != outbox.StatePending || !row.NextAt.After(a.clock.Now()) {
			t.Fatalf("%s: m1 = %s next_at %v; want pending in backoff", recover, row.State, row.NextAt)
		}
		if st := a.reach.Get(reach.Relay); st.State != reach.Down || st.OutageSince.IsZero() {
			t.Fatalf("%s: after a push without an answer the relay is %+v, want down", recover, st)
		}
		if recover == "push" {
			m2 := a.send("alice", []string{"bob@beta"}, "fine", "accepted")
			if n := a.passOnce(); n != 1 {
				t.Fatalf("pass sent %d, want m2 only", n)
			}
			if st := a.rowState(m2.ID, "beta"); st != outbox.StateRelayAccepted {
				t.Fatalf("m2 = %s, want relay-accepted", st)
			}
		} else {
			a.pull()
		}
		if n := a.passOnce(); n != 1 {
			t.Fatalf("%s: pass after the relay answered sent %d, want m1", recover, n)
		}
		if st := a.rowState(m1.ID, "beta"); st != outbox.StateRelayAccepted {
			t.Fatalf("%s: m1 = %s after the recovery pass, want relay-accepted", recover, st)
		}
		if st := a.reach.Get(reach.Relay); st.State != reach.Up || !st.OutageSince.IsZero() {
			t.Fatalf("%s: after the recovery the relay is %+v, want up", recover, st)
		}
	}
}
