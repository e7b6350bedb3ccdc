package host

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
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

// TestRelayUnstorableAcceptBacksOff: an accept statement that verifies but that the outbox cannot
// store (here an epoch with a control character, from a faulty or hostile relay) fails that row's
// attempt with backoff. It neither aborts the recording of the other rows pushed with it nor
// leaves the rows due at once, to be pushed again on every pass.
func TestRelayUnstorableAcceptBacksOff(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(acc map[string]any)
	}{
		{"an epoch with a control character", func(acc map[string]any) { acc["epoch"] = "bad\u0001epoch" }},
		{"a statement over the outbox's limit", func(acc map[string]any) { acc["pad"] = strings.Repeat("x", outbox.MaxStatement) }},
	} {
		t.Run(c.name, func(t *testing.T) { unstorableAccept(t, c.edit) })
	}
}

func unstorableAccept(t *testing.T, edit func(acc map[string]any)) {
	a, _, r := relayPair(t, mbx.Limits{})
	r.set(func(r *testRelay) { r.rewrite = rewriteAccepts(t, r.key(), edit) })
	res1 := a.send("alice", []string{"bob@beta"}, "one", "x")
	res2 := a.send("alice", []string{"bob@beta"}, "two", "y")
	if n := a.passOnce(); n != 2 {
		t.Fatalf("first pass took %d rows, want 2", n)
	}
	for _, id := range []string{res1.ID, res2.ID} {
		row := a.row(id, "beta")
		if row.State != outbox.StatePending || row.Attempts != 1 || !row.NextAt.After(a.clock.Now()) || row.LastError == "" {
			t.Fatalf("row %s after an unstorable accept: %s, %d attempts, next at %s (now %s), last error %q; want pending with backoff",
				id, row.State, row.Attempts, row.NextAt, a.clock.Now(), row.LastError)
		}
	}
	pushes, _ := r.counts()
	if n := a.passOnce(); n != 0 {
		t.Fatalf("a second pass right away took %d rows", n)
	}
	if p, _ := r.counts(); p != pushes {
		t.Fatalf("pushed again before next_at")
	}
}

// TestInitRaceKeepsOneIdentity: of several inits racing on one home, exactly one creates the
// identity; the others are refused (it exists, or the store is locked) and replace nothing.
func TestInitRaceKeepsOneIdentity(t *testing.T) {
	for round := range 5 {
		dir := filepath.Join(t.TempDir(), "home")
		const n = 6
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- Init(dir, InitOptions{Host: fmt.Sprintf("h%d", i)})
			}()
		}
		wg.Wait()
		close(errs)
		ok := 0
		for err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrExists), errors.Is(err, ErrLocked):
			default:
				t.Fatalf("round %d: Init: %v", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d inits succeeded, want exactly 1", round, ok)
		}
		h, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		h.Close()
	}
}
