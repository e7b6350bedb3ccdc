package host

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

func TestMailBothWays(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()

	res := a.send("alice", []string{"bob@beta"}, "hello", "Hi bob, the build is green.")
	if !slices.Equal(res.Hosts, []string{"beta"}) || len(res.Local) != 0 {
		t.Fatalf("send result = %+v, want hosts [beta] and no local", res)
	}
	if r := a.row(res.ID, "beta"); r.State != outbox.StatePending || len(r.Wire) == 0 {
		t.Fatalf("row before the pass: state %s, %d wire bytes; want pending with wire", r.State, len(r.Wire))
	}
	settle(t, a, b)
	if r := a.row(res.ID, "beta"); r.State != outbox.StateDone {
		t.Fatalf("row after delivery: %s, want done", r.State)
	}
	got := b.inbox("bob", false)
	if len(got) != 1 || got[0].Body != "Hi bob, the build is green." || got[0].From != "alice@alpha" || got[0].Subject != "hello" {
		t.Fatalf("bob's inbox = %+v, want the message from alice@alpha", got)
	}
	if got[0].State != "notified" {
		t.Errorf("state after Inbox = %q, want notified", got[0].State)
	}
	if g := got[0]; g.Via != api.ViaLAN || g.Origin != "alpha" || g.Fingerprint != a.Key().Fingerprint() {
		t.Errorf("arrival recorded as via %q from %q key %q, want the LAN, alpha, %s", g.Via, g.Origin, g.Fingerprint, a.Key().Fingerprint())
	}
	local := b.send("bea", []string{"bob"}, "here", "local mail")
	if m, err := b.mail.Read(ctx, api.ReadRequest{ID: local.ID, Agent: "bob"}); err != nil ||
		m.Via != api.ViaLocal || m.Origin != "" || m.Fingerprint != b.Key().Fingerprint() {
		t.Errorf("local mail recorded as via %q from %q key %q (%v), want local, this host's key", m.Via, m.Origin, m.Fingerprint, err)
	}
	// bob answers
	rep, err := b.Send(ctx, api.SendRequest{From: "bob", To: []string{"alice@alpha"}, Subject: "re: hello", Body: "thanks", ReplyTo: res.ID, Kind: "reply"})
	if err != nil {
		t.Fatal(err)
	}
	settle(t, a, b)
	ga := a.inbox("alice", false)
	if len(ga) != 1 || ga[0].ID != rep.ID || ga[0].ReplyTo != res.ID || ga[0].Kind != "reply" {
		t.Fatalf("alice's inbox = %+v, want bob's reply", ga)
	}
	// receipts came back: alice sees bob's state
	sent, err := a.Sent(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent.Recipients) != 1 || sent.Recipients[0].Recipient != "bob@beta" || sent.Recipients[0].State != "notified" {
		t.Fatalf("sent recipients = %+v, want bob@beta notified", sent.Recipients)
	}
	if len(sent.Rows) != 1 || sent.Rows[0].State != "done" {
		t.Fatalf("sent rows = %+v, want one done row", sent.Rows)
	}
}

func TestBroadcastAndRoleFanout(t *testing.T) {
	clock := newClock()
	a, b, c := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock), newTestHost(t, "gamma", clock)
	pairAll(t, a, b, c)
	ctx := context.Background()
	for _, x := range []struct {
		h    *testHost
		name string
		role string
	}{{a, "alice", ""}, {a, "ann", "dev"}, {b, "bob", "dev"}, {b, "bea", ""}, {c, "carl", "dev"}, {c, "cat", "ops"}} {
		if _, err := x.h.AddAgent(ctx, api.Agent{Name: x.name, Role: x.role}); err != nil {
			t.Fatal(err)
		}
	}

	all := a.send("alice", []string{"*"}, "to everyone", "hi all")
	if want := []string{"ann@alpha"}; !slices.Equal(all.Local, want) {
		t.Errorf("broadcast local = %v, want %v (not the sender)", all.Local, want)
	}
	if want := []string{"beta", "gamma"}; !slices.Equal(all.Hosts, want) {
		t.Errorf("broadcast hosts = %v, want %v", all.Hosts, want)
	}
	role := a.send("alice", []string{"role:dev"}, "devs only", "hi devs")
	named := a.send("alice", []string{"bob@beta", "bea@beta", "carl@gamma"}, "named", "two on beta, one row")
	if rows := a.rows(); len(rows) != 2+2+2 {
		t.Fatalf("alpha has %d outbox rows, want 6 (one per message and host)", len(rows))
	}
	settle(t, a, b, c)

	want := map[*testHost]map[string][]string{
		a: {"alice": nil, "ann": {"to everyone", "devs only"}},
		b: {"bob": {"to everyone", "devs only", "named"}, "bea": {"to everyone", "named"}},
		c: {"carl": {"to everyone", "devs only", "named"}, "cat": {"to everyone"}},
	}
	for h, agents := range want {
		for agent, subs := range agents {
			if got := subjects(h.inbox(agent, true)); !slices.Equal(got, subs) {
				t.Errorf("%s/%s inbox = %q, want %q", h.name, agent, got, subs)
			}
		}
	}
	for _, id := range []string{all.ID, role.ID, named.ID} {
		for _, r := range a.rows() {
			if r.ItemID == id && r.State != outbox.StateDone {
				t.Errorf("row %s→%s is %s, want done", id, r.Host, r.State)
			}
		}
	}
	// Sent shows every remote recipient once their receipts are in.
	settle(t, a, b, c)
	sent, err := a.Sent(ctx, all.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rcpts []string
	for _, r := range sent.Recipients {
		rcpts = append(rcpts, r.Recipient+"="+r.State)
	}
	wantR := []string{"ann@alpha=notified", "bea@beta=notified", "bob@beta=notified", "carl@gamma=notified", "cat@gamma=notified"}
	if !slices.Equal(rcpts, wantR) {
		t.Errorf("sent recipients = %v, want %v", rcpts, wantR)
	}
}

func TestBareNameAndOwner(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	b.AddAgent(ctx, api.Agent{Name: "bob"})
	a.AddAgent(ctx, api.Agent{Name: "bob"})
	res := a.send("alice", []string{"bob"}, "bare", "to every bob")
	if !slices.Equal(res.Local, []string{"bob@alpha"}) || !slices.Equal(res.Hosts, []string{"beta"}) {
		t.Fatalf("bare name routed to %+v, want bob@alpha and host beta", res)
	}
	own := a.send("alice", []string{"owner"}, "for the owner", "local only")
	if !slices.Equal(own.Local, []string{"owner@alpha"}) || len(own.Hosts) != 0 {
		t.Fatalf("owner routed to %+v, want owner@alpha only", own)
	}
	remoteOwner := a.send("alice", []string{"owner@beta"}, "for beta's owner", "there")
	settle(t, a, b)
	if got := subjects(b.inbox("bob", true)); !slices.Equal(got, []string{"bare"}) {
		t.Errorf("beta/bob = %q", got)
	}
	if got := subjects(a.inbox("owner", true)); !slices.Equal(got, []string{"for the owner"}) {
		t.Errorf("alpha/owner = %q", got)
	}
	if got := subjects(b.inbox("owner", true)); !slices.Equal(got, []string{"for beta's owner"}) {
		t.Errorf("beta/owner = %q", got)
	}
	// The owner is a mailbox, not an agent: broadcasts do not reach it.
	agents, _ := b.Agents(ctx)
	for _, ag := range agents {
		if ag.Name == AgentOwner {
			t.Errorf("owner registered as an agent: %+v", agents)
		}
	}
	_ = remoteOwner
}

func TestReceiptsSettleStates(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	res := a.send("alice", []string{"bob@beta", "bo@beta"}, "states", "follow me")
	// Deliver the envelope only; the row ends done by the LAN answer.
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	sent, _ := a.Sent(ctx, res.ID)
	for _, r := range sent.Recipients {
		if r.State != "queued" {
			t.Errorf("before any receipt %s is %s, want queued", r.Recipient, r.State)
		}
	}
	step := func(want map[string]string) {
		t.Helper()
		settle(t, a, b)
		sent, err := a.Sent(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range sent.Recipients {
			got[r.Recipient] = r.State
			if r.State == "acked" && r.Note != "done, thanks" {
				t.Errorf("acked note = %q", r.Note)
			}
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
	}
	step(map[string]string{"bob@beta": "delivered", "bo@beta": "delivered"})
	if _, err := b.mail.Read(ctx, api.ReadRequest{ID: res.ID, Agent: "bob"}); err != nil {
		t.Fatal(err)
	}
	step(map[string]string{"bob@beta": "read", "bo@beta": "delivered"})
	if _, err := b.mail.Ack(ctx, api.AckRequest{ID: res.ID, Agent: "bob", Note: "done, thanks"}); err != nil {
		t.Fatal(err)
	}
	b.inbox("bo", false)
	step(map[string]string{"bob@beta": "acked", "bo@beta": "notified"})
	// Forward only: reading an acked message leaves it acked and sends nothing.
	m, err := b.mail.Read(ctx, api.ReadRequest{ID: res.ID, Agent: "bob"})
	if err != nil || m.State != "acked" {
		t.Fatalf("read after ack = %q, %v; want acked", m.State, err)
	}
	if n, _ := b.pass(ctx, true); n != 0 {
		t.Errorf("a read after ack queued %d receipts, want 0", n)
	}
	// A replayed (older) receipt is stale and changes nothing.
	var delivered []byte
	for _, r := range b.rows() {
		if r.Kind == outbox.KindReceipt && r.ItemID == "receipt:"+res.ID+":bob@beta:1" {
			full := b.row(r.ItemID, "alpha")
			delivered = full.Wire
		}
	}
	if delivered == nil {
		t.Fatal("no delivered receipt row on beta")
	}
	out, err := a.acceptReceipts([]json.RawMessage{delivered}, "beta")
	if err != nil || out[0].Status != "stale" {
		t.Fatalf("replayed receipt = %+v, %v; want stale", out, err)
	}
	// A receipt from another host than the recipient's is refused.
	out, err = a.acceptReceipts([]json.RawMessage{delivered}, "gamma")
	if err != nil || !strings.HasPrefix(string(out[0].Status), "rejected:") {
		t.Fatalf("receipt via another hop = %+v, %v; want rejected", out, err)
	}
	if r := a.row(res.ID, "beta"); r.State != outbox.StateDone {
		t.Errorf("row = %s, want done", r.State)
	}
}

func TestLargestBodyCrossesTheLAN(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	body := strings.Repeat("0123456789abcdef", mbx.MaxBody/16)
	// Two of them: each fits a request alone, so the pass sends two batches.
	r1 := a.send("alice", []string{"bob@beta"}, "big one", body)
	r2 := a.send("alice", []string{"bob@beta"}, "big two", body)
	settle(t, a, b)
	for _, id := range []string{r1.ID, r2.ID} {
		if r := a.row(id, "beta"); r.State != outbox.StateDone {
			t.Fatalf("row %s = %s (%s), want done", id, r.State, r.LastError)
		}
	}
	got := b.inbox("bob", true)
	if len(got) != 2 || got[0].Body != body || got[1].Body != body {
		t.Fatalf("bob got %d messages (or a changed body)", len(got))
	}
}
