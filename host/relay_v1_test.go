package host

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relaylink"
	"github.com/agentmbx/agentmbx/relayserver/relaytest/v1only"
)

// A relay that speaks only v1 (relaylink/v1.go; spec §11).

// v1Front is a v1-only relay (relayserver/relaytest/v1only) behind a URL that can later serve something else
// (the relay upgraded to v2).
type v1Front struct {
	relay *v1only.Relay
	url   string
	next  atomic.Pointer[http.Handler]
}

func newV1Front(t *testing.T, clock *testkit.Clock) *v1Front {
	t.Helper()
	f := &v1Front{relay: v1only.New(v1only.Options{Clock: clock.Now})}
	var h http.Handler = f.relay
	f.next.Store(&h)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*f.next.Load()).ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

// serve makes the front serve h from now on.
func (f *v1Front) serve(h http.Handler) { f.next.Store(&h) }

// useV1 pins the v1 relay at url, knowingly, and enrols.
func (th *testHost) useV1(url string) {
	th.t.Helper()
	st, err := th.Relay().RelaySet(context.Background(), api.RelaySetRequest{URL: url, AllowV1: true})
	if err != nil {
		th.t.Fatalf("%s: RelaySet --allow-v1: %v", th.name, err)
	}
	if !st.V1 || st.RelayPubkey != "" || st.Fingerprint != "" || st.TOFU {
		th.t.Fatalf("%s: status after pinning a v1 relay = %+v", th.name, st)
	}
	th.keep()
}

// TestRelayV1SetRefusals: relay set against a v1 relay explains that it has no identity to pin
// and refuses --key; without --allow-v1 it refuses too; nothing is pinned either way.
func TestRelayV1SetRefusals(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	f := newV1Front(t, clock)
	ctx := context.Background()
	other, _ := mbx.GenerateSigningKey(testkit.Rand(77))
	for _, c := range []struct {
		req  api.RelaySetRequest
		want error
	}{
		{api.RelaySetRequest{URL: f.url}, relaylink.ErrRelayV1Only},
		{api.RelaySetRequest{URL: f.url, Key: other.Fingerprint()}, relaylink.ErrRelayV1Key},
		{api.RelaySetRequest{URL: f.url, Key: other.Fingerprint(), AllowV1: true}, relaylink.ErrRelayV1Key},
	} {
		_, err := a.Relay().RelaySet(ctx, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("RelaySet(%+v) = %v, want %v", c.req, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "no relay key") {
			t.Errorf("RelaySet(%+v): %q does not say the relay has no key", c.req, err)
		}
	}
	if st, err := a.Relay().RelayStatus(ctx); err != nil || st.Configured {
		t.Fatalf("status after refused sets = %+v, %v; want nothing pinned", st, err)
	}
	a.useV1(f.url)
	st, _ := a.Relay().RelayStatus(ctx)
	if !st.Enrolled || st.EncAdAt == "" || len(st.Problems) != 0 || !f.relay.Enrolled(a.key.PublicKey()) ||
		f.relay.EncAd(a.key.PublicKey()) != a.enc.PublicKey() {
		t.Fatalf("status after the v1 enrolment = %+v", st)
	}
}

// v1Pair is two hosts with no LAN route between them, both on one v1-only relay.
func v1Pair(t *testing.T) (a, b *testHost, f *v1Front) {
	t.Helper()
	clock := newClock()
	a, b = newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pinNoLAN(t, a, b)
	f = newV1Front(t, clock)
	a.useV1(f.url)
	b.useV1(f.url)
	return a, b, f
}

// TestRelayV1MailBothWays: mail goes both ways through a v1-only relay. The relay's "stored" is
// unsigned, so the row stays pending, shown as sent through the v1 relay, until the delivery
// receipt, which comes back through the same relay inside a receipts envelope, settles it.
func TestRelayV1MailBothWays(t *testing.T) {
	a, b, f := v1Pair(t)
	ctx := context.Background()
	res := a.send("alice", []string{"bob@beta"}, "via a v1 relay", "no LAN between us")
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	row := a.row(res.ID, "beta")
	if row.State != outbox.StatePending || row.Transport != outbox.TransportRelay || row.Relay != f.url ||
		row.RelayV1At.IsZero() || row.Epoch != "" || row.Seq != 0 || len(row.Statement) != 0 {
		t.Fatalf("row after the v1 push = %+v", row)
	}
	listed, err := a.Outbox(ctx)
	if err != nil || len(listed) != 1 || listed[0].RelayV1At == "" || listed[0].State != "pending" ||
		!strings.Contains(listed[0].Waiting, "v1 relay") || !strings.Contains(listed[0].Waiting, "delivery receipt") {
		t.Fatalf("outbox listing = %+v, %v; want pending, sent through the v1 relay", listed, err)
	}
	if q := f.relay.Queued(b.key.PublicKey()); len(q) != 1 {
		t.Fatalf("the relay holds %d envelopes for beta, want 1", len(q))
	}
	if n := b.pull(); n != 1 {
		t.Fatalf("beta pulled %d items, want 1", n)
	}
	if got := b.inbox("bob", false); len(got) != 1 || got[0].ID != res.ID || got[0].Body != "no LAN between us" {
		t.Fatalf("bob's inbox = %+v", got)
	}
	flow(t, a, b)
	if s := a.rowState(res.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("row after the receipts = %s, want done (settled by the receipt through the v1 relay)", s)
	}
	sent, err := a.Sent(ctx, res.ID)
	if err != nil || len(sent.Recipients) != 1 || sent.Recipients[0].State != "notified" {
		t.Fatalf("sent = %+v, %v; want bob notified", sent, err)
	}
	for _, rr := range b.rows() {
		if rr.Kind != outbox.KindReceipt || rr.State != outbox.StateDone || rr.Transport != outbox.TransportRelay || rr.RelayV1At.IsZero() {
			t.Errorf("beta's receipt row %s: %s over %s, want done through the v1 relay", rr.ItemID, rr.State, rr.Transport)
		}
	}
	// And back.
	rep := b.send("bob", []string{"alice@alpha"}, "re: via a v1 relay", "got it")
	flow(t, a, b)
	if a.copies("alice", rep.ID) != 1 || b.copies("bob", res.ID) != 1 {
		t.Fatal("a message is missing or duplicated")
	}
	if s := b.rowState(rep.ID, "alpha"); s != outbox.StateDone {
		t.Fatalf("bob's row = %s, want done", s)
	}
	// Receipts envelopes reach no mailbox, and nothing was quarantined.
	for _, h := range []*testHost{a, b} {
		if ms := h.inbox("mbx", true); len(ms) != 0 {
			t.Errorf("%s: mbx got %d messages", h.name, len(ms))
		}
		if q, err := h.Relay().RelayQuarantine(ctx); err != nil || len(q) != 0 {
			t.Errorf("%s: quarantine = %+v, %v", h.name, q, err)
		}
	}
}

// TestRelayV1RelayRestart: a v1 relay of 0.5.3 forgets everything when it restarts (G1). The
// hosts enrol again when their hops are refused, the receiver pulls from 0 again (the cursor
// went back), and the row the relay lost, still pending, is pushed again and settles.
func TestRelayV1RelayRestart(t *testing.T) {
	a, b, f := v1Pair(t)
	ctx := context.Background()
	first := a.send("alice", []string{"bob@beta"}, "before the restart", "one")
	flow(t, a, b)
	if s := a.rowState(first.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("first row = %s, want done", s)
	}
	lost := a.send("alice", []string{"bob@beta"}, "lost in the restart", "two")
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	if r := a.row(lost.ID, "beta"); r.RelayV1At.IsZero() || r.State != outbox.StatePending {
		t.Fatalf("row before the restart = %+v", r)
	}
	f.relay.Restart()
	// beta's pull is refused (401): it enrols again and finds the cursor gone back.
	if n := b.pull(); n != 0 {
		t.Fatalf("beta pulled %d after the restart, want 0 (the relay lost it)", n)
	}
	if !f.relay.Enrolled(b.key.PublicKey()) {
		t.Fatal("beta did not enrol again")
	}
	// alpha's next push of the pending row is refused (401): it forgets its enrolment, enrols
	// again, and the push after that stores the row once more.
	for i := 0; i < 3 && b.copies("bob", lost.ID) == 0; i++ {
		a.clock.Advance(outbox.LatestBackoff(a.row(lost.ID, "beta").Attempts))
		if _, err := a.pass(ctx, true); err != nil {
			t.Fatal(err)
		}
		a.keep()
		b.pull()
	}
	if b.copies("bob", lost.ID) != 1 || !f.relay.Enrolled(a.key.PublicKey()) {
		t.Fatalf("bob has %d copies of the re-pushed message (alpha enrolled again: %v)", b.copies("bob", lost.ID), f.relay.Enrolled(a.key.PublicKey()))
	}
	flow(t, a, b)
	if s := a.rowState(lost.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("re-pushed row = %s, want done", s)
	}
	if b.copies("bob", first.ID) != 1 {
		t.Fatal("the first message was delivered twice after the rewind")
	}
}

// TestRelayV1UpgradeToV2: the v1 relay is replaced by a v2 relay under the same URL. The hosts
// go on speaking v1 to it (it keeps the v1 routes), note that it answers v2 and show the key to
// pin; once the owners pin it, they speak v2: the row the old relay lost goes out again, is
// accepted with a signed statement, and settles.
func TestRelayV1UpgradeToV2(t *testing.T) {
	a, b, f := v1Pair(t)
	ctx := context.Background()
	first := a.send("alice", []string{"bob@beta"}, "under v1", "one")
	flow(t, a, b)
	if s := a.rowState(first.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("first row = %s, want done", s)
	}
	pending := a.send("alice", []string{"bob@beta"}, "pushed to the v1 relay, lost in the upgrade", "two")
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}

	r := newTestRelay(t, a.clock, mbx.Limits{})
	f.serve(http.HandlerFunc(r.serve))
	for _, h := range []*testHost{a, b} {
		h.keep()
		st, err := h.Relay().RelayStatus(ctx)
		if err != nil || !st.V1 || st.V2 == nil || st.V2.RelayPubkey != r.key().PublicKey() || st.V2.Fingerprint != r.key().Fingerprint() {
			t.Fatalf("%s: status once the relay answers v2 = %+v, %v; want the key to pin", h.name, st, err)
		}
	}
	// The owners compare the fingerprint and pin it.
	for _, h := range []*testHost{a, b} {
		st, err := h.Relay().RelaySet(ctx, api.RelaySetRequest{URL: f.url, Key: r.key().Fingerprint()})
		if err != nil || st.V1 || st.V2 != nil || st.Fingerprint != r.key().Fingerprint() || st.TOFU || st.Replaced != "" {
			t.Fatalf("%s: pinning the v2 key = %+v, %v", h.name, st, err)
		}
		h.keep()
	}
	a.clock.Advance(outbox.LatestBackoff(a.row(pending.ID, "beta").Attempts))
	flow(t, a, b)
	row := a.row(pending.ID, "beta")
	if row.State != outbox.StateDone || row.Epoch != r.epoch() || len(row.Statement) == 0 {
		t.Fatalf("the row the v1 relay lost = %+v, want done after a signed acceptance", row)
	}
	if b.copies("bob", pending.ID) != 1 || b.copies("bob", first.ID) != 1 {
		t.Fatal("a message is missing or duplicated")
	}
	// New mail both ways is relay-accepted, then settled.
	m3 := a.send("alice", []string{"bob@beta"}, "under v2", "three")
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	if s := a.rowState(m3.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("new row under v2 = %s, want relay-accepted", s)
	}
	m4 := b.send("bob", []string{"alice@alpha"}, "under v2 back", "four")
	flow(t, a, b)
	if a.rowState(m3.ID, "beta") != outbox.StateDone || b.rowState(m4.ID, "alpha") != outbox.StateDone || a.copies("alice", m4.ID) != 1 {
		t.Fatal("mail under v2 did not settle")
	}
}

// TestRelayV1Daemons: two daemons on a v1-only relay with real clocks, pinned over their control
// sockets with --allow-v1. Mail goes both ways and settles; then each daemon is stopped and
// started again while mail is on its way: a row pushed before its sender's restart settles after
// it, and nothing is delivered twice.
func TestRelayV1Daemons(t *testing.T) {
	v1 := v1only.New(v1only.Options{})
	ts := httptest.NewServer(v1)
	t.Cleanup(ts.Close)
	homes := map[string]string{}
	for _, n := range []string{"alpha", "beta"} {
		homes[n] = filepath.Join(t.TempDir(), n)
		if err := Init(homes[n], InitOptions{Host: n}); err != nil {
			t.Fatal(err)
		}
	}
	opts := DaemonOptions{RelayWait: -1}
	a := runDaemonOpts(t, homes["alpha"], "alpha", opts)
	b := runDaemonOpts(t, homes["beta"], "beta", opts)
	for _, p := range []struct{ d, peer *daemon }{{a, b}, {b, a}} {
		rec := p.peer.record(t)
		rec.Addr = ""
		if err := p.d.h.PinPeer(rec); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dial := func(n string) *client.Client {
		c, err := client.Dial(ctx, homes[n])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := dial("alpha"), dial("beta")
	for n, c := range map[string]*client.Client{"alpha": ca, "beta": cb} {
		if _, err := c.RelaySet(ctx, api.RelaySetRequest{URL: ts.URL}); err == nil || !strings.Contains(err.Error(), "v1") {
			t.Fatalf("%s: RelaySet of a v1 relay without --allow-v1 = %v, want a refusal", n, err)
		}
		if st, err := c.RelaySet(ctx, api.RelaySetRequest{URL: ts.URL, AllowV1: true}); err != nil || !st.V1 || !st.Daemon {
			t.Fatalf("%s: RelaySet --allow-v1 over the socket = %+v, %v", n, st, err)
		}
	}
	enrolled := func(c *client.Client) bool {
		st, err := c.RelayStatus(ctx)
		return err == nil && st.Enrolled && st.EncAdAt != ""
	}
	waitFor(t, "both enrolled", func() bool { return enrolled(ca) && enrolled(cb) })
	settled := func(c *client.Client, id string) func() bool {
		return func() bool {
			s, err := c.Sent(ctx, id)
			return err == nil && len(s.Rows) == 1 && s.Rows[0].State == "done"
		}
	}
	m1, err := ca.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta"}, Subject: "one", Body: "through a v1 relay"})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := cb.Send(ctx, api.SendRequest{From: "bob", To: []string{"alice@alpha"}, Subject: "two", Body: "and back"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both rows settled by their receipts", func() bool { return settled(ca, m1.ID)() && settled(cb, m2.ID)() })

	// beta stops; alpha's next message reaches the relay, unsigned, and waits pending.
	b.stop(t)
	m3, err := ca.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta"}, Subject: "three", Body: "while beta is down"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message stored by the v1 relay", func() bool {
		s, err := ca.Sent(ctx, m3.ID)
		return err == nil && len(s.Rows) == 1 && s.Rows[0].RelayV1At != "" && s.Rows[0].State == "pending"
	})
	// alpha stops too; beta starts, takes the message and sends its receipt back through the
	// relay; alpha starts and settles the row.
	a.stop(t)
	runDaemonOpts(t, homes["beta"], "beta", opts) // its cleanup stops it
	cb = dial("beta")
	waitFor(t, "the message at bob after his host's restart", func() bool {
		all, err := cb.Inbox(ctx, "bob", true)
		return err == nil && slices.ContainsFunc(all, func(m api.Message) bool { return m.ID == m3.ID })
	})
	waitFor(t, "beta's receipts pushed", func() bool {
		rows, err := cb.Outbox(ctx)
		if err != nil {
			return false
		}
		for _, r := range rows {
			if r.Kind == "receipt" && r.State != "done" {
				return false
			}
		}
		return true
	})
	runDaemonOpts(t, homes["alpha"], "alpha", opts) // its cleanup stops it
	ca = dial("alpha")
	waitFor(t, "the row settled after alpha's restart", settled(ca, m3.ID))
	for _, id := range []string{m1.ID, m3.ID} {
		all, err := cb.Inbox(ctx, "bob", true)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range all {
			if m.ID == id {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("bob has %d copies of %s", n, id)
		}
	}
}
