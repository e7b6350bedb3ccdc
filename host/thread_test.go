package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailindex"
)

func ids(ms []api.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func states(ms []api.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.State)
	}
	return out
}

func TestReplyAndThreadAcrossHosts(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()

	first := a.send("alice", []string{"bob@beta"}, "deploy plan", "Shall we deploy on Friday?")
	settle(t, a, b)
	clock.Advance(time.Millisecond)
	r1, err := b.Reply(ctx, api.ReplyRequest{From: "bob", ID: first.ID, Body: "Thursday is better."})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r1.Hosts, []string{"alpha"}) {
		t.Fatalf("bob's reply went to %v, want alpha", r1.Hosts)
	}
	settle(t, a, b)
	clock.Advance(time.Millisecond)
	r2, err := a.Reply(ctx, api.ReplyRequest{From: "alice", ID: r1.ID, Body: "Thursday it is."})
	if err != nil {
		t.Fatal(err)
	}
	settle(t, a, b)

	got, err := b.Thread(ctx, api.ThreadRequest{Agent: "bob", ID: r2.ID})
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
	ga, err := a.Thread(ctx, api.ThreadRequest{Agent: "alice", ID: first.ID})
	if err != nil || !slices.Equal(ids(ga.Messages), want) {
		t.Fatalf("alice's thread = %v, %v; want %v", ids(ga.Messages), err, want)
	}

	// Each host now knows the other's agent: from the mail, the name@host address, the receipts.
	for _, c := range []struct {
		h    *testHost
		want string
	}{{a, "bob@beta"}, {b, "alice@alpha"}} {
		ks, err := c.h.KnownAgents(ctx)
		if err != nil || len(ks) != 1 || ks[0].Address != c.want {
			t.Errorf("%s knows %+v (%v), want %s", c.h.name, ks, err, c.want)
		}
	}

	// Another agent sees nothing of it; an unknown id is not found.
	if _, err := b.Thread(ctx, api.ThreadRequest{Agent: "carol", ID: first.ID}); !isErr(err, ErrNotFound) {
		t.Errorf("carol's thread of bob's mail: %v, want ErrNotFound", err)
	}
	if _, err := b.Reply(ctx, api.ReplyRequest{From: "carol", ID: first.ID, Body: "x"}); !isErr(err, ErrNotFound) {
		t.Errorf("carol replying to bob's mail: %v, want ErrNotFound", err)
	}
	if _, err := b.Thread(ctx, api.ThreadRequest{ID: "01JUNKJUNKJUNKJUNKJUNKJUNK"}); !isErr(err, ErrNotFound) {
		t.Errorf("thread of an unknown id: %v, want ErrNotFound", err)
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
	res, err := a.Reply(ctx, api.ReplyRequest{From: "alice", ID: first.ID, Body: "moved to one", Subject: "standup moved"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Local, []string{"bob@alpha", "carol@alpha"}) {
		t.Fatalf("follow-up went to %v, want bob and carol", res.Local)
	}
	th, err := a.Thread(ctx, api.ThreadRequest{Agent: "carol", ID: res.ID})
	if err != nil || !slices.Equal(ids(th.Messages), []string{first.ID, res.ID}) || th.Messages[1].Subject != "standup moved" {
		t.Fatalf("carol's thread = %+v, %v", th, err)
	}
	// Send with reply_to and no thread joins the thread too.
	s, err := a.Send(ctx, api.SendRequest{From: "bob", To: []string{"alice@alpha"}, Body: "ok", ReplyTo: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	th, err = a.Thread(ctx, api.ThreadRequest{ID: first.ID})
	if err != nil || !slices.Equal(ids(th.Messages), []string{first.ID, res.ID, s.ID}) {
		t.Fatalf("host's thread = %v, %v; want the send with reply_to in it", ids(th.Messages), err)
	}
}

func TestReplyRefusals(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	// An alert from the host itself cannot be answered.
	var alert storedMessage
	if err := a.db.Update(func(tx *bbolt.Tx) error {
		alert = storedMessage{ID: a.ulids.New(clock.Now()), TS: "2026-10-02T10:00:00.000Z", From: AgentMBX,
			To: []string{"alice@alpha"}, Subject: "Undelivered", Body: "x", Kind: "alert"}
		return a.deliverLocalTx(tx, &alert, []string{"alice"}, clock.Now())
	}); err != nil {
		t.Fatal(err)
	}
	before := a.counts()
	for _, c := range []struct {
		name string
		req  api.ReplyRequest
		want error
	}{
		{"alert", api.ReplyRequest{From: "alice", ID: alert.ID, Body: "?"}, ErrReserved},
		{"bad id", api.ReplyRequest{From: "alice", ID: "nope", Body: "?"}, ErrInvalid},
		{"bad agent", api.ReplyRequest{From: "Alice!", ID: alert.ID, Body: "?"}, ErrInvalid},
		{"as mbx", api.ReplyRequest{From: "mbx", ID: alert.ID, Body: "?"}, ErrReserved},
	} {
		if _, err := a.Reply(ctx, c.req); !isErr(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if after := a.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused reply changed the store: %v → %v", before, after)
	}
}

func TestSearchWordsScopesAndPages(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	for _, n := range []string{"bob", "carol"} {
		if _, err := a.AddAgent(ctx, api.Agent{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	m1 := a.send("alice", []string{"bob"}, "Deploy plan", "The DEPLOY is on Friday, café at noon.")
	m2 := a.send("alice", []string{"bob"}, "lunch", "Friday lunch at the café?")
	m3 := a.send("carol", []string{"bob"}, "deploy done", "deployed friday")
	m4 := a.send("bob", []string{"carol"}, "re", "deploy friday went fine")

	search := func(agent, q string, limit int) api.SearchResult {
		t.Helper()
		r, err := a.Search(ctx, api.SearchRequest{Agent: agent, Query: q, Limit: limit})
		if err != nil {
			t.Fatalf("Search(%s, %q): %v", agent, q, err)
		}
		return r
	}
	for _, c := range []struct {
		agent, q string
		want     []string
	}{
		{"bob", "friday", []string{m4.ID, m3.ID, m2.ID, m1.ID}}, // newest first; bob's sent mail too
		{"bob", "deploy FRIDAY", []string{m4.ID, m3.ID, m1.ID}}, // every word, in subject or body; case folded
		{"bob", "CAFÉ", []string{m2.ID, m1.ID}},                 // Unicode case folding
		{"bob", "deployed lunch", nil},                          // "deployed" is a word of its own
		{"alice", "friday", []string{m2.ID, m1.ID}},             // alice sent these two
		{"carol", "deploy", []string{m4.ID, m3.ID}},
		{"", "deploy", []string{m4.ID, m3.ID, m1.ID}}, // the host's view
		{"bob", "tuesday", nil},
	} {
		r := search(c.agent, c.q, 0)
		if !slices.Equal(ids(r.Messages), c.want) || r.More {
			t.Errorf("Search(%q, %q) = %v more=%v, want %v", c.agent, c.q, ids(r.Messages), r.More, c.want)
		}
	}
	r := search("bob", "friday", 2)
	if !slices.Equal(ids(r.Messages), []string{m4.ID, m3.ID}) || !r.More {
		t.Errorf("limit 2 = %v more=%v, want the newest two and more", ids(r.Messages), r.More)
	}
	if r.Messages[0].State != "sent" || r.Messages[1].State != "delivered" || r.Messages[1].Body != "deployed friday" {
		t.Errorf("bob's view = %+v, want his own message as sent and carol's as delivered, whole", r.Messages)
	}

	before := a.counts()
	for _, bad := range []api.SearchRequest{
		{Agent: "bob", Query: "  ...  "},
		{Agent: "bob", Query: string(make([]byte, api.MaxQuery+1))},
		{Agent: "bob", Query: "a b c d e f g h i j k l m n o p q"},
		{Agent: "bob", Query: "x", Limit: api.MaxPage + 1},
		{Agent: "bob", Query: "x", Limit: -1},
		{Agent: "Bob!", Query: "x"},
	} {
		if _, err := a.Search(ctx, bad); !isErr(err, ErrInvalid) {
			t.Errorf("Search(%+v): %v, want ErrInvalid", bad, err)
		}
	}
	if after := a.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a search changed the store")
	}
}

func TestInboxPageNewestLastWithMore(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	var sent []string
	for i := range 5 {
		clock.Advance(time.Millisecond)
		sent = append(sent, a.send("alice", []string{"alice@alpha"}, fmt.Sprint("m", i), "body").ID)
	}
	p, err := a.InboxPage(ctx, api.InboxRequest{Agent: "alice", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(p.Messages), sent[3:]) || p.More != 3 {
		t.Fatalf("page = %v more %d, want the newest two %v and 3 more", ids(p.Messages), p.More, sent[3:])
	}
	if s := states(p.Messages); !slices.Equal(s, []string{"notified", "notified"}) {
		t.Errorf("shown states = %v, want notified", s)
	}
	p, err = a.InboxPage(ctx, api.InboxRequest{Agent: "alice", Since: sent[1]})
	if err != nil || !slices.Equal(ids(p.Messages), sent[2:]) || p.More != 0 {
		t.Fatalf("since %s = %v more %d (%v), want %v", sent[1], ids(p.Messages), p.More, err, sent[2:])
	}
	if _, err := a.Read(ctx, api.ReadRequest{Agent: "alice", ID: sent[4]}); err != nil {
		t.Fatal(err)
	}
	p, _ = a.InboxPage(ctx, api.InboxRequest{Agent: "alice"})
	pAll, _ := a.InboxPage(ctx, api.InboxRequest{Agent: "alice", All: true})
	if len(p.Messages) != 4 || len(pAll.Messages) != 5 {
		t.Errorf("unread %d, all %d; want 4 and 5 after one read", len(p.Messages), len(pAll.Messages))
	}
	for _, bad := range []api.InboxRequest{{Agent: "alice", Limit: -1}, {Agent: ""}, {Agent: "alice", Since: "a\x00b"}} {
		if _, err := a.InboxPage(ctx, bad); !isErr(err, ErrInvalid) {
			t.Errorf("InboxPage(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestWaitNewReturnsEachNewMessageOnce(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	var sent []string
	for i := range 3 {
		sent = append(sent, a.send("alice", []string{"bob@alpha"}, fmt.Sprint("m", i), "body").ID)
	}
	p, err := a.WaitNew(ctx, api.WaitRequest{Agent: "bob", Limit: 2, Timeout: time.Minute})
	if err != nil || !slices.Equal(ids(p.Messages), sent[:2]) || p.More != 1 {
		t.Fatalf("first wait = %v more %d (%v), want the oldest two and 1 more", ids(p.Messages), p.More, err)
	}
	p, err = a.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: time.Minute})
	if err != nil || !slices.Equal(ids(p.Messages), sent[2:]) || p.More != 0 {
		t.Fatalf("second wait = %v more %d (%v), want the third", ids(p.Messages), p.More, err)
	}
	// Nothing new: the unread mail already shown does not end a wait.
	p, err = a.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: 0})
	if err != nil || len(p.Messages) != 0 || p.Messages == nil {
		t.Fatalf("wait with nothing new = %+v, %v; want an empty page", p, err)
	}
	done := make(chan api.InboxPage, 1)
	go func() {
		p, err := a.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- p
	}()
	late := a.send("carol", []string{"bob@alpha"}, "late", "arrives while bob waits")
	select {
	case p := <-done:
		if !slices.Equal(ids(p.Messages), []string{late.ID}) {
			t.Fatalf("woken wait = %v, want %s", ids(p.Messages), late.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a wait was not woken by new mail")
	}
	if _, err := a.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: time.Hour}); !isErr(err, ErrInvalid) {
		t.Errorf("a wait over MaxWait: %v, want ErrInvalid", err)
	}
}

func TestSchemaOneStoreGetsItsIndexesBuilt(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	m := a.send("alice", []string{"bob@alpha"}, "old mail", "from before the index")
	// Make the store look like schema 1: no index buckets' contents, version 1.
	if err := a.db.Update(func(tx *bbolt.Tx) error {
		for _, b := range mailindex.Buckets {
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
	r, err := h.Search(ctx, api.SearchRequest{Agent: "alice", Query: "index"})
	if err != nil || !slices.Equal(ids(r.Messages), []string{m.ID}) {
		t.Fatalf("search after the upgrade = %v, %v; want the old message", ids(r.Messages), err)
	}
	p, err := h.WaitNew(ctx, api.WaitRequest{Agent: "bob"})
	if err != nil || !slices.Equal(ids(p.Messages), []string{m.ID}) {
		t.Fatalf("bob's new mail after the upgrade = %v, %v", ids(p.Messages), err)
	}
}
