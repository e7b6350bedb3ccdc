package host

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

// ids and states list the ids and the states of a page of mail, in order.
func ids(ms []api.Message) []string {
	return testkit.Map(ms, func(m api.Message) string { return m.ID })
}

func states(ms []api.Message) []string {
	return testkit.Map(ms, func(m api.Message) string { return m.State })
}

func TestReplyAndThreadAcrossHosts(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()

	first := a.send("alice", []string{"bob@beta"}, "deploy plan", "Shall we deploy on Friday?")
	settle(t, a, b)
	clock.Advance(time.Millisecond)
	r1, err := b.mail.Reply(ctx, api.ReplyRequest{From: "bob", ID: first.ID, Body: "Thursday is better."})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r1.Hosts, []string{"alpha"}) {
		t.Fatalf("bob's reply went to %v, want alpha", r1.Hosts)
	}
	settle(t, a, b)
	clock.Advance(time.Millisecond)
	r2, err := a.mail.Reply(ctx, api.ReplyRequest{From: "alice", ID: r1.ID, Body: "Thursday it is."})
	if err != nil {
		t.Fatal(err)
	}
	settle(t, a, b)

	got, err := b.mail.Thread(ctx, api.ThreadRequest{Agent: "bob", ID: r2.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{first.ID, r1.ID, r2.ID}
	if got.Thread != first.ID || !slices.Equal(ids(got.Messages), want) {
		t.Fatalf("bob's thread = %s %v, want %s %v", got.Thread, ids(got.Messages), first.ID, want)
	}
	if s := states(got.Messages); !slices.Equal(s, []string{"delivered", "sent", "delivered"}) {
		t.Errorf("bob's thread states = %v, want delivered, sent, delivered (a thread view marks nothing)", s)
	}
	m := got.Messages[1]
	if m.Subject != "Re: deploy plan" || m.Kind != "reply" || m.ReplyTo != first.ID || m.Thread != first.ID || m.From != "bob@beta" {
		t.Errorf("bob's reply = %+v, want Re: subject, kind reply, reply_to and thread of the first", m)
	}
	if got.Messages[2].Subject != "Re: deploy plan" {
		t.Errorf("a reply to a reply got subject %q, want no second Re:", got.Messages[2].Subject)
	}
	// alice's view by thread id: the same three messages.
	ga, err := a.mail.Thread(ctx, api.ThreadRequest{Agent: "alice", ID: first.ID})
	if err != nil || !slices.Equal(ids(ga.Messages), want) {
		t.Fatalf("alice's thread = %v, %v; want %v", ids(ga.Messages), err, want)
	}

	// Each host now knows the other's agent: from the mail, the name@host address, the receipts.
	for _, c := range []struct {
		h    *testHost
		want string
	}{{a, "bob@beta"}, {b, "alice@alpha"}} {
		ks, err := c.h.mail.KnownAgents(ctx)
		if err != nil || len(ks) != 1 || ks[0].Address != c.want {
			t.Errorf("%s knows %+v (%v), want %s", c.h.name, ks, err, c.want)
		}
	}

	// Another agent sees nothing of it; an unknown id is not found.
	if _, err := b.mail.Thread(ctx, api.ThreadRequest{Agent: "carol", ID: first.ID}); !isErr(err, api.ErrNotFound) {
		t.Errorf("carol's thread of bob's mail: %v, want api.ErrNotFound", err)
	}
	if _, err := b.mail.Reply(ctx, api.ReplyRequest{From: "carol", ID: first.ID, Body: "x"}); !isErr(err, api.ErrNotFound) {
		t.Errorf("carol replying to bob's mail: %v, want api.ErrNotFound", err)
	}
	if _, err := b.mail.Thread(ctx, api.ThreadRequest{ID: "01JUNKJUNKJUNKJUNKJUNKJUNK"}); !isErr(err, api.ErrNotFound) {
		t.Errorf("thread of an unknown id: %v, want api.ErrNotFound", err)
	}
}

func TestReplyToOwnMessageGoesToItsRecipients(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	for _, n := range []string{"bob", "carol"} {
		if _, err := a.AddAgent(ctx, api.Agent{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	first := a.send("alice", []string{"bob", "carol"}, "standup", "notes at noon")
	res, err := a.mail.Reply(ctx, api.ReplyRequest{From: "alice", ID: first.ID, Body: "moved to one", Subject: "standup moved"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Local, []string{"bob@alpha", "carol@alpha"}) {
		t.Fatalf("follow-up went to %v, want bob and carol", res.Local)
	}
	th, err := a.mail.Thread(ctx, api.ThreadRequest{Agent: "carol", ID: res.ID})
	if err != nil || !slices.Equal(ids(th.Messages), []string{first.ID, res.ID}) || th.Messages[1].Subject != "standup moved" {
		t.Fatalf("carol's thread = %+v, %v", th, err)
	}
	// Send with reply_to and no thread joins the thread too.
	s, err := a.Send(ctx, api.SendRequest{From: "bob", To: []string{"alice@alpha"}, Body: "ok", ReplyTo: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	th, err = a.mail.Thread(ctx, api.ThreadRequest{ID: first.ID})
	if err != nil || !slices.Equal(ids(th.Messages), []string{first.ID, res.ID, s.ID}) {
		t.Fatalf("host's thread = %v, %v; want the send with reply_to in it", ids(th.Messages), err)
	}
}

func TestSchemaOneStoreGetsItsIndexesBuilt(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	m := a.send("alice", []string{"bob@alpha"}, "old mail", "from before the index")
	// Make the store look like schema 1: no index buckets' contents, version 1.
	if err := a.db.Update(func(tx *bbolt.Tx) error {
		for _, b := range mailstore.IndexBuckets {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, binary.BigEndian.AppendUint64(nil, 1))
	}); err != nil {
		t.Fatal(err)
	}
	a.stop()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := Open(a.dir, &Options{Clock: clock.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	a.Host = h
	r, err := h.mail.Search(ctx, api.SearchRequest{Agent: "alice", Query: "index"})
	if err != nil || !slices.Equal(ids(r.Messages), []string{m.ID}) {
		t.Fatalf("search after the upgrade = %v, %v; want the old message", ids(r.Messages), err)
	}
	p, err := h.mail.WaitNew(ctx, api.WaitRequest{Agent: "bob"})
	if err != nil || !slices.Equal(ids(p.Messages), []string{m.ID}) {
		t.Fatalf("bob's new mail after the upgrade = %v, %v", ids(p.Messages), err)
	}
}
