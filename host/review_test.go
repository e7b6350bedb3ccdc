package host

import (
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// TestRelayRefusedRowTriesLANAgain: a row that went to the relay after two failed LAN attempts,
// and that the relay does not take (here: beta never enrolled there), tries the LAN again when
// it is next due, instead of waiting on the relay until its 72 h deadline while beta's LAN
// answers.
func TestRelayRefusedRowTriesLANAgain(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	r := newTestRelay(t, clock, mbx.Limits{})
	a.useRelay(r) // beta has no relay: the relay cannot take mail for it

	b.gate.setDown(true)
	res := a.send("alice", []string{"bob@beta"}, "hi", "the LAN comes back")
	for i := 0; i < 2; i++ {
		a.passOnce()
		clock.Advance(a.row(res.ID, "beta").NextAt.Sub(clock.Now()))
	}
	a.passOnce()
	row := a.row(res.ID, "beta")
	if row.State != outbox.StatePending || row.Transport != outbox.TransportRelay || !strings.Contains(row.LastError, "target not enrolled") {
		t.Fatalf("after two LAN failures and a relay attempt: %s over %s, last error %q; want pending, refused by the relay",
			row.State, row.Transport, row.LastError)
	}

	b.gate.setDown(false)
	clock.Advance(row.NextAt.Sub(clock.Now()))
	a.passOnce()
	if row = a.row(res.ID, "beta"); row.State != outbox.StateDone || row.Transport != outbox.TransportLAN {
		t.Fatalf("once beta's LAN answers: %s over %s (last error %q), want done over the LAN", row.State, row.Transport, row.LastError)
	}
	if n := b.copies("bob", res.ID); n != 1 {
		t.Fatalf("bob holds %d copies, want 1", n)
	}
}
