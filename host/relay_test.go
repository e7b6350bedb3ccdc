package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relaylink"
)

// relayPair is two hosts with no LAN route between them (peers pinned without addresses), both
// using one relay.
func relayPair(t *testing.T, limits mbx.Limits) (a, b *testHost, r *testRelay) {
	t.Helper()
	clock := newClock()
	a, b = newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pinNoLAN(t, a, b)
	r = newTestRelay(t, clock, limits)
	a.useRelay(r)
	b.useRelay(r)
	return a, b, r
}

func TestRelaySet(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	r := newTestRelay(t, clock, mbx.Limits{})
	ctx := context.Background()

	other, _ := mbx.GenerateSigningKey(testkit.Rand(77))
	if _, err := a.Relay().RelaySet(ctx, api.RelaySetRequest{URL: r.url, Key: other.Fingerprint()}); !errors.Is(err, relaylink.ErrRelayKeyMismatch) {
		t.Fatalf("RelaySet with another key's fingerprint = %v, want relaylink.ErrRelayKeyMismatch", err)
	}
	for _, bad := range []api.RelaySetRequest{{URL: "ftp://x"}, {URL: r.url, Key: "not-a-key"}, {URL: ""}} {
		if _, err := a.Relay().RelaySet(ctx, bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("RelaySet(%+v) = %v, want api.ErrInvalid", bad, err)
		}
	}
	if _, err := a.Relay().RelaySet(ctx, api.RelaySetRequest{URL: "http://127.0.0.1:1"}); !errors.Is(err, relaylink.ErrRelayUnreachable) {
		t.Errorf("RelaySet(nothing listening) = %v, want relaylink.ErrRelayUnreachable", err)
	}
	if st, err := a.Relay().RelayStatus(ctx); err != nil || st.Configured {
		t.Fatalf("status after refused sets = %+v, %v; want nothing pinned", st, err)
	}

	st, err := a.Relay().RelaySet(ctx, api.RelaySetRequest{URL: r.url + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Configured || !st.TOFU || st.URL != r.url || st.Fingerprint != r.key().Fingerprint() || st.Enrolled {
		t.Fatalf("status after a TOFU set = %+v", st)
	}
	st, err = a.Relay().RelaySet(ctx, api.RelaySetRequest{URL: r.url, Key: r.key().Fingerprint()})
	if err != nil || st.TOFU || st.Replaced != "" {
		t.Fatalf("set again with --key = %+v, %v; want the pin confirmed", st, err)
	}
	a.keep()
	st, _ = a.Relay().RelayStatus(ctx)
	if !st.Enrolled || st.Epoch != r.epoch() || st.EncAdExp == "" || st.SendersAt == "" || len(st.Problems) != 0 {
		t.Fatalf("status after enrolment = %+v", st)
	}
	if _, err := a.Relay().RelayUnset(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Relay().RelayStatus(ctx); st.Configured {
		t.Fatalf("status after unset = %+v", st)
	}
	if _, err := a.Relay().RelayUnset(ctx); !errors.Is(err, relaylink.ErrNoRelay) {
		t.Fatalf("second unset = %v, want relaylink.ErrNoRelay", err)
	}
}

// TestRelayMailBothWays: mail and its receipts go through the relay between hosts that have no
// LAN route; the relay-accepted row is settled by the delivery receipt that came over the relay.
func TestRelayMailBothWays(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	res := a.send("alice", []string{"bob@beta"}, "via relay", "no LAN between us")
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	row := a.row(res.ID, "beta")
	if row.State != outbox.StateRelayAccepted || row.Transport != outbox.TransportRelay || row.Relay != r.url ||
		row.Epoch != r.epoch() || row.Seq <= 0 || row.AcceptedAt.IsZero() || len(row.Statement) == 0 {
		t.Fatalf("row after the push = %+v", row)
	}
	if want := row.AcceptedAt.Add(14*24*time.Hour + outbox.DefaultGrace); !row.Deadline.Equal(want) {
		t.Errorf("deadline = %v, want accepted_at + 14 d + 24 h = %v", row.Deadline, want)
	}
	rows, err := a.Outbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Relay != r.url || rows[0].Epoch != row.Epoch || rows[0].Seq != row.Seq ||
		rows[0].AcceptedAt == "" || rows[0].Deadline == "" || rows[0].State != "relay-accepted" {
		t.Errorf("outbox --json row = %+v", rows)
	}
	if n := b.pull(); n != 1 {
		t.Fatalf("beta pulled %d items, want 1", n)
	}
	got := b.inbox("bob", false)
	if len(got) != 1 || got[0].ID != res.ID || got[0].Body != "no LAN between us" {
		t.Fatalf("bob's inbox = %+v", got)
	}
	if g := got[0]; g.Via != api.ViaRelay || g.Origin != "alpha" || g.Fingerprint != a.Key().Fingerprint() {
		t.Errorf("arrival recorded as via %q from %q key %q, want the relay, alpha, %s", g.Via, g.Origin, g.Fingerprint, a.Key().Fingerprint())
	}
	// bob's inbox showed it (notified): delivered and notified receipts go back through the relay.
	flow(t, a, b)
	if s := a.rowState(res.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("row after the receipts = %s, want done", s)
	}
	sent, err := a.Sent(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent.Recipients) != 1 || sent.Recipients[0].State != "notified" {
		t.Fatalf("sent = %+v, want bob notified", sent.Recipients)
	}
	for _, rr := range b.rows() {
		if rr.Kind != outbox.KindReceipt || rr.State != outbox.StateDone || rr.Transport != outbox.TransportRelay {
			t.Errorf("beta's receipt row %s: %s over %s, want done over the relay", rr.ItemID, rr.State, rr.Transport)
		}
	}
	// And back: bob answers, alice reads it.
	rep := b.send("bob", []string{"alice@alpha"}, "re: via relay", "got it")
	flow(t, a, b)
	if a.copies("alice", rep.ID) != 1 || b.copies("bob", res.ID) != 1 {
		t.Fatal("a message is missing or duplicated")
	}
	if _, err := a.mail.Read(ctx, api.ReadRequest{ID: rep.ID, Agent: "alice"}); err != nil {
		t.Fatal(err)
	}
	flow(t, a, b)
	sent, _ = b.Sent(ctx, rep.ID)
	if len(sent.Recipients) != 1 || sent.Recipients[0].State != "read" || sent.Rows[0].State != "done" {
		t.Fatalf("bob's sent = %+v", sent)
	}
	if st, _ := b.Relay().RelayStatus(ctx); st.RelayAccepted != 0 || st.ReceivedThrough == 0 || st.Quarantined != 0 {
		t.Errorf("beta's relay status = %+v", st)
	}
}
