package mailstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

func TestReplyRefusals(t *testing.T) {
	a := newTestStore(t, false)
	clock := a.clock
	ctx := context.Background()
	// An alert from the host itself cannot be answered.
	alert := Message{ID: a.ulids.New(clock.Now()), TS: "2026-10-02T10:00:00.000Z", From: AgentMBX,
		To: []string{"alice@alpha"}, Subject: "Undelivered", Body: "x", Kind: "alert"}
	a.receive(alert, "alice")
	before := a.counts()
	for _, c := range []struct {
		name string
		req  api.ReplyRequest
		want error
	}{
		{"alert", api.ReplyRequest{From: "alice", ID: alert.ID, Body: "?"}, api.ErrReserved},
		{"bad id", api.ReplyRequest{From: "alice", ID: "nope", Body: "?"}, api.ErrInvalid},
		{"bad agent", api.ReplyRequest{From: "Alice!", ID: alert.ID, Body: "?"}, api.ErrInvalid},
		{"as mbx", api.ReplyRequest{From: "mbx", ID: alert.ID, Body: "?"}, api.ErrReserved},
	} {
		if _, err := a.Reply(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if after := a.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused reply changed the store: %v → %v", before, after)
	}
}

func TestSearchWordsScopesAndPages(t *testing.T) {
	a := newTestStore(t, false)
	ctx := context.Background()
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
		if _, err := a.Search(ctx, bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Search(%+v): %v, want api.ErrInvalid", bad, err)
		}
	}
	if after := a.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a search changed the store")
	}
}

func TestInboxPageNewestLastWithMore(t *testing.T) {
	a := newTestStore(t, false)
	clock := a.clock
	ctx := context.Background()
	var sent []string
	for i := range 5 {
		clock.Advance(time.Millisecond)
		sent = append(sent, a.send("alice", []string{"alice"}, fmt.Sprint("m", i), "body").ID)
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
		if _, err := a.InboxPage(ctx, bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("InboxPage(%+v): %v, want api.ErrInvalid", bad, err)
		}
	}
}

// A peek lists the page as it is: nothing moves to notified, no receipt is queued, and the
// new mail is still new for WaitNew.
func TestInboxPagePeekChangesNothing(t *testing.T) {
	ts := newTestStore(t, true)
	ctx := context.Background()
	m := fromBeta(ts, "hello")
	ts.receive(m, "bob")
	before, receipts := ts.counts(), ts.receipts()
	p, err := ts.InboxPage(ctx, api.InboxRequest{Agent: "bob", Peek: true})
	if err != nil || !slices.Equal(ids(p.Messages), []string{m.ID}) || !slices.Equal(states(p.Messages), []string{"delivered"}) {
		t.Fatalf("peek = %+v, %v; want the message, still delivered", p, err)
	}
	if !maps.Equal(ts.counts(), before) || !slices.Equal(ts.receipts(), receipts) {
		t.Error("a peek changed the store")
	}
	w, err := ts.WaitNew(ctx, api.WaitRequest{Agent: "bob"})
	if err != nil || !slices.Equal(ids(w.Messages), []string{m.ID}) {
		t.Errorf("WaitNew after a peek = %+v, %v; want the message as new", w, err)
	}
}

func TestWaitNewReturnsEachNewMessageOnce(t *testing.T) {
	a := newTestStore(t, false)
	ctx := context.Background()
	var sent []string
	for i := range 3 {
		sent = append(sent, a.send("alice", []string{"bob"}, fmt.Sprint("m", i), "body").ID)
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
	late := a.send("carol", []string{"bob"}, "late", "arrives while bob waits")
	select {
	case p := <-done:
		if !slices.Equal(ids(p.Messages), []string{late.ID}) {
			t.Fatalf("woken wait = %v, want %s", ids(p.Messages), late.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a wait was not woken by new mail")
	}
	if _, err := a.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: time.Hour}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a wait over MaxWait: %v, want api.ErrInvalid", err)
	}
}
