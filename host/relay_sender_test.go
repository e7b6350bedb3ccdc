package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// passOnce runs one outbox pass on th and waits for its sends.
func (th *testHost) passOnce() int {
	th.t.Helper()
	n, err := th.pass(context.Background(), true)
	if err != nil {
		th.t.Fatalf("%s: pass: %v", th.name, err)
	}
	return n
}

// alerts returns the alerts in agent's mailbox.
func (th *testHost) alerts(agent string) []api.Message {
	th.t.Helper()
	var out []api.Message
	for _, m := range th.inbox(agent, true) {
		if m.From == AgentMBX && m.Kind == string(mbx.KindAlert) {
			out = append(out, m)
		}
	}
	return out
}

// TestRelayLostPushResponse: the relay commits a push but its answer is lost (on every try of
// the call: the client's own retries are duplicates that lose their answers too). The row stays
// pending; the retry (same bytes) is a duplicate with the same seq, and the row becomes
// relay-accepted once; the recipient gets the message once.
func TestRelayLostPushResponse(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	r.set(func(r *testRelay) { r.dropPushes = lostTries })
	res := a.send("alice", []string{"bob@beta"}, "lost answer", "the relay has it")
	a.passOnce()
	row := a.row(res.ID, "beta")
	if row.State != outbox.StatePending || row.Attempts != 1 || row.LastError == "" || !row.NextAt.After(a.clock.Now()) {
		t.Fatalf("row after a lost answer = %s, %d attempts, last error %q, next at %v; want pending with backoff",
			row.State, row.Attempts, row.LastError, row.NextAt)
	}
	if a.passOnce() != 0 {
		t.Fatal("a pass before next_at sent the row again")
	}
	a.clock.Advance(outbox.BaseBackoff)
	a.passOnce()
	row = a.row(res.ID, "beta")
	if row.State != outbox.StateRelayAccepted {
		t.Fatalf("row after the retry = %s (%s), want relay-accepted", row.State, row.LastError)
	}
	if pushes, _ := r.counts(); pushes != lostTries+1 {
		t.Errorf("pushes = %d, want %d", pushes, lostTries+1)
	}
	if n := b.pull(); n != 1 {
		t.Fatalf("beta pulled %d items, want exactly the one stored", n)
	}
	pos, err := b.rpos.Position(context.Background(), r.url)
	if err != nil {
		t.Fatal(err)
	}
	if pos.ReceivedThrough != row.Seq {
		t.Errorf("the retry's statement says seq %d, the relay stored it at %d", row.Seq, pos.ReceivedThrough)
	}
	flow(t, a, b)
	if b.copies("bob", res.ID) != 1 || a.rowState(res.ID, "beta") != outbox.StateDone {
		t.Fatalf("bob has %d copies, row %s; want 1 and done", b.copies("bob", res.ID), a.rowState(res.ID, "beta"))
	}
}

// TestRelayRejectedResults: a 200 answer whose result is a rejection keeps the row: pending with
// backoff and its reason when a retry can help (a quota), ended with an alert when not.
func TestRelayRejectedResults(t *testing.T) {
	lim := mbx.DefaultLimits()
	lim.MaxQueueItems = 1
	lim.MaxItemBytes = 4096
	a, b, _ := relayPair(t, lim)

	first := a.send("alice", []string{"bob@beta"}, "first", "fits")
	second := a.send("alice", []string{"bob@beta"}, "second", "over the queue quota")
	a.passOnce()
	if s := a.rowState(first.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("first row = %s, want relay-accepted", s)
	}
	row := a.row(second.ID, "beta")
	if row.State != outbox.StatePending || !strings.Contains(row.LastError, "rejected:quota:") || !row.NextAt.After(a.clock.Now()) {
		t.Fatalf("second row = %s, last error %q, next at %v; want pending with the quota reason and backoff", row.State, row.LastError, row.NextAt)
	}
	if len(a.alerts("alice")) != 0 {
		t.Fatal("a retryable rejection alerted the sender")
	}
	// beta takes the first item; the queue has room again.
	b.pull()
	a.clock.Advance(outbox.BaseBackoff)
	a.passOnce()
	if s := a.rowState(second.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("second row after the queue drained = %s, want relay-accepted", s)
	}

	big := a.send("alice", []string{"bob@beta"}, "too big", strings.Repeat("x", 5000))
	a.passOnce()
	row = a.row(big.ID, "beta")
	if row.State != outbox.StateRejected || !strings.Contains(row.Reason, "too large") {
		t.Fatalf("oversized row = %s (%q), want rejected for size", row.State, row.Reason)
	}
	al := a.alerts("alice")
	if len(al) != 1 || !strings.HasPrefix(al[0].Subject, "Undelivered to beta: too big") || !strings.Contains(al[0].Body, "too large") {
		t.Fatalf("alerts = %+v, want one for the refused message", al)
	}
	flow(t, a, b)
	if b.copies("bob", first.ID) != 1 || b.copies("bob", second.ID) != 1 || b.copies("bob", big.ID) != 0 {
		t.Fatal("bob's mailbox is not first and second once each")
	}
}

// TestRelayForgedAccepts: accept statements that do not prove this row's acceptance — signed by
// another key, over other bytes, for another target, for another item — leave the row pending.
func TestRelayForgedAccepts(t *testing.T) {
	forger, _ := mbx.GenerateSigningKey(testkit.Rand(55))
	stranger, _ := mbx.GenerateSigningKey(testkit.Rand(56))
	cases := []struct {
		name string
		key  func(r *testRelay) mbx.SigningKey
		edit func(a map[string]any)
	}{
		{"signed by another key", func(*testRelay) mbx.SigningKey { return forger }, func(map[string]any) {}},
		{"another wire hash", (*testRelay).key, func(a map[string]any) {
			a["targets"].([]any)[0].(map[string]any)["wire_hash"] = strings.Repeat("0", 64)
		}},
		{"another target", (*testRelay).key, func(a map[string]any) {
			a["targets"].([]any)[0].(map[string]any)["host_pubkey"] = stranger.PublicKey()
		}},
		{"another item", (*testRelay).key, func(a map[string]any) { a["item_id"] = "01KKNTQ2CN9WJ3MR4Q1P12F02T" }},
		{"another sender", (*testRelay).key, func(a map[string]any) { a["sender_pubkey"] = stranger.PublicKey() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, r := relayPair(t, mbx.Limits{})
			r.set(func(r *testRelay) { r.rewrite = rewriteAccepts(t, c.key(r), c.edit) })
			res := a.send("alice", []string{"bob@beta"}, "forged", "accept")
			a.passOnce()
			row := a.row(res.ID, "beta")
			if row.State != outbox.StatePending || !strings.Contains(row.LastError, "accept") {
				t.Fatalf("row after a forged accept = %s (%q), want pending", row.State, row.LastError)
			}
			if st, _ := a.Relay().RelayStatus(context.Background()); st.Stopped {
				t.Fatalf("a forged statement stopped relay use: %+v", st)
			}
			r.set(func(r *testRelay) { r.rewrite = nil })
			a.clock.Advance(outbox.BaseBackoff)
			flow(t, a, b)
			if s := a.rowState(res.ID, "beta"); s != outbox.StateDone || b.copies("bob", res.ID) != 1 {
				t.Fatalf("after honest answers: row %s, %d copies; want done and 1", s, b.copies("bob", res.ID))
			}
		})
	}
}

// TestRelayDeadline: a relay-accepted row whose delivery receipt never comes ends unconfirmed at
// accepted_at + retention + 24 h, without any word from the relay, and the sender is alerted. A
// target that never sent a receipt (older than 0.5.3) gets the no-confirmation wording.
func TestRelayDeadline(t *testing.T) {
	a, b, _ := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	res := a.send("alice", []string{"bob@beta"}, "never confirmed", "beta runs an old agentmbx")
	a.passOnce()
	row := a.row(res.ID, "beta")
	// beta pulls the mail but, like a pre-0.5.3 host, never sends a receipt (its outbox never runs).
	b.pull()
	if b.copies("bob", res.ID) != 1 {
		t.Fatal("beta did not get the mail")
	}
	a.pull()
	a.clock.Advance(row.Deadline.Sub(a.clock.Now()) - time.Millisecond)
	if n, _ := a.sweep(ctx); n != 0 || a.rowState(res.ID, "beta") != outbox.StateRelayAccepted {
		t.Fatal("the row ended before its deadline")
	}
	a.clock.Advance(time.Millisecond)
	if n, err := a.sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep at the deadline ended %d rows, %v", n, err)
	}
	if s := a.rowState(res.ID, "beta"); s != outbox.StateUnconfirmed {
		t.Fatalf("row = %s, want unconfirmed", s)
	}
	al := a.alerts("alice")
	if len(al) != 1 || !strings.HasPrefix(al[0].Subject, "Undelivered/unconfirmed to beta") || !strings.Contains(al[0].Body, "older than 0.5.3") {
		t.Fatalf("alert = %+v, want the older-peer wording", al)
	}

	// A target that sent receipts before: the plain wording.
	second := a.send("alice", []string{"bob@beta"}, "first one", "confirmed")
	flow(t, a, b) // beta's outbox runs now: receipts come back
	if s := a.rowState(second.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("confirmed row = %s", s)
	}
	third := a.send("alice", []string{"bob@beta"}, "lost later", "never confirmed")
	a.passOnce()
	a.clock.Advance(15*24*time.Hour + time.Hour)
	if _, err := a.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if s := a.rowState(third.ID, "beta"); s != outbox.StateUnconfirmed {
		t.Fatalf("third row = %s, want unconfirmed", s)
	}
	al = a.alerts("alice")
	last := al[len(al)-1]
	if len(al) != 2 || strings.Contains(last.Body, "older than 0.5.3") || !strings.Contains(last.Body, "sent delivery receipts before") {
		t.Fatalf("second alert = %+v, want the plain wording", last)
	}
}

// TestRelayTransportSelection: a row moves to the relay after two failed LAN attempts, each
// attempt waiting for the row's next_at; when the peer's LAN address does not answer at all, new
// rows skip it; once the peer answers on the LAN again new rows go there, while relay-accepted
// rows are never sent over the LAN.
func TestRelayTransportSelection(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	r := newTestRelay(t, clock, mbx.Limits{})
	a.useRelay(r)
	b.useRelay(r)

	// beta answers its LAN, but with errors.
	b.gate.setDown(true)
	res := a.send("alice", []string{"bob@beta"}, "first", "LAN answers 503")
	a.passOnce()
	row := a.row(res.ID, "beta")
	if row.State != outbox.StatePending || row.LANFailures != 1 || row.Transport != outbox.TransportLAN {
		t.Fatalf("after one LAN attempt: %+v", row)
	}
	if n := a.passOnce(); n != 0 {
		t.Fatalf("a pass before next_at took %d rows", n)
	}
	clock.Advance(row.NextAt.Sub(clock.Now()))
	a.passOnce()
	row = a.row(res.ID, "beta")
	if row.State != outbox.StatePending || row.LANFailures != 2 || row.Transport != outbox.TransportLAN {
		t.Fatalf("after two LAN attempts: %s over %s with %d LAN failures", row.State, row.Transport, row.LANFailures)
	}
	a.passOnce()
	if pushes, _ := r.counts(); pushes != 0 {
		t.Fatalf("pushed %d times before the row's next_at", pushes)
	}
	clock.Advance(row.NextAt.Sub(clock.Now()))
	a.passOnce()
	if row = a.row(res.ID, "beta"); row.State != outbox.StateRelayAccepted || row.Transport != outbox.TransportRelay {
		t.Fatalf("after the relay attempt: %s over %s", row.State, row.Transport)
	}

	// beta's LAN address stops answering at all (every connection closed unanswered; the port
	// stays beta's, so it can answer again later): a new row tries it once, then goes to the
	// relay, and a row made meanwhile skips the LAN.
	b.gate.setMute(true)
	b.gate.setDown(false)
	res2 := a.send("alice", []string{"bob@beta"}, "second", "LAN unreachable")
	a.passOnce()
	if row := a.row(res2.ID, "beta"); row.State != outbox.StatePending || row.LANFailures != 1 {
		t.Fatalf("second row: %s with %d LAN failures, want one failed LAN attempt", row.State, row.LANFailures)
	}
	res3 := a.send("alice", []string{"bob@beta"}, "third", "LAN still unreachable")
	a.passOnce()
	if row := a.row(res3.ID, "beta"); row.State != outbox.StateRelayAccepted || row.LANFailures != 0 {
		t.Fatalf("third row: %s with %d LAN failures, want relay-accepted without a LAN attempt", row.State, row.LANFailures)
	}
	clock.Advance(outbox.BaseBackoff)
	a.passOnce()
	if s := a.rowState(res2.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("second row after its backoff = %s, want relay-accepted", s)
	}
	b.pull()

	// beta's LAN comes back; after lanRetryAfter new rows try it again and get through.
	b.gate.setMute(false)
	clock.Advance(lanRetryAfter)
	pushes, _ := r.counts()
	res4 := a.send("alice", []string{"bob@beta"}, "fourth", "LAN is back")
	a.passOnce()
	if row := a.row(res4.ID, "beta"); row.State != outbox.StateDone || row.Transport != outbox.TransportLAN {
		t.Fatalf("fourth row: %s over %s, want done over the LAN", row.State, row.Transport)
	}
	if p, _ := r.counts(); p != pushes {
		t.Fatal("the LAN delivery pushed to the relay")
	}
	// The relay-accepted rows stay relay-accepted (due or not, the LAN never takes them) until
	// their receipts come; beta's receipts go over the LAN now.
	if _, err := a.ob.MakeDue(context.Background(), "beta"); err != nil {
		t.Fatal(err)
	}
	a.passOnce()
	for _, id := range []string{res.ID, res2.ID, res3.ID} {
		if row := a.row(id, "beta"); row.State != outbox.StateRelayAccepted {
			t.Fatalf("row %s = %s over %s before its receipt", id, row.State, row.Transport)
		}
	}
	flow(t, a, b)
	for _, id := range []string{res.ID, res2.ID, res3.ID, res4.ID} {
		if s := a.rowState(id, "beta"); s != outbox.StateDone || b.copies("bob", id) != 1 {
			t.Fatalf("row %s = %s with %d copies at bob; want done and 1", id, s, b.copies("bob", id))
		}
	}
	if p, _ := r.counts(); p != pushes {
		t.Errorf("the relay saw %d more pushes after the LAN came back", p-pushes)
	}
}

// TestRelayKeyChange: a relay that serves another key behind the pinned URL stops all relay use
// until the owner confirms the new key; then mail flows again.
func TestRelayKeyChange(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	oldFP := r.key().Fingerprint()
	newKey := r.rekey()
	if err := a.relayKeep(ctx, false); err == nil {
		t.Fatal("relayKeep against another relay key succeeded")
	}
	st, _ := a.Relay().RelayStatus(ctx)
	if !st.Stopped || st.KeyChange == nil || st.KeyChange.Pinned != oldFP || st.KeyChange.Served != newKey.Fingerprint() {
		t.Fatalf("status after the key change = %+v", st)
	}
	res := a.send("alice", []string{"bob@beta"}, "held", "relay stopped")
	a.passOnce()
	if pushes, _ := r.counts(); pushes != 0 {
		t.Fatalf("pushed %d times to a relay with another key", pushes)
	}
	if row := a.row(res.ID, "beta"); row.State != outbox.StatePending || row.Transport != outbox.TransportLAN {
		t.Fatalf("row while relay use is stopped = %s over %s", row.State, row.Transport)
	}
	if _, err := a.relayReceive(ctx); err == nil {
		t.Fatal("pulled from a relay whose key changed")
	}
	// The owner checks the new key and confirms it.
	st, err := a.Relay().RelaySet(ctx, api.RelaySetRequest{URL: r.url, Key: newKey.Fingerprint()})
	if err != nil || st.Stopped || st.Replaced != oldFP {
		t.Fatalf("confirming the new key: %+v, %v", st, err)
	}
	a.keep()
	if _, err := b.Relay().RelaySet(ctx, api.RelaySetRequest{URL: r.url, Key: newKey.Fingerprint()}); err != nil {
		t.Fatal(err)
	}
	b.keep()
	a.clock.Advance(time.Hour)
	flow(t, a, b)
	if s := a.rowState(res.ID, "beta"); s != outbox.StateDone || b.copies("bob", res.ID) != 1 {
		t.Fatalf("after confirming: row %s, %d copies", s, b.copies("bob", res.ID))
	}
}

// TestRelayStatementByAnotherKey: a push answer whose statement is consistently signed by another
// relay key (another relay answers at the pinned URL) stops relay use, and the row stays pending.
func TestRelayStatementByAnotherKey(t *testing.T) {
	a, _, r := relayPair(t, mbx.Limits{})
	other, _ := mbx.GenerateSigningKey(testkit.Rand(57))
	r.set(func(r *testRelay) {
		r.rewrite = rewriteAccepts(t, other, func(a map[string]any) { a["relay_pubkey"] = other.PublicKey() })
	})
	res := a.send("alice", []string{"bob@beta"}, "impostor", "answers")
	a.passOnce()
	if s := a.rowState(res.ID, "beta"); s != outbox.StatePending {
		t.Fatalf("row = %s, want pending", s)
	}
	st, _ := a.Relay().RelayStatus(context.Background())
	if !st.Stopped || st.KeyChange == nil || st.KeyChange.Served != other.Fingerprint() {
		t.Fatalf("status = %+v, want relay use stopped", st)
	}
}

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
