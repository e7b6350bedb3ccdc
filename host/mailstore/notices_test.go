package mailstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

func notices(t *testing.T, ts *testStore, agent string, limit int) api.InboxPage {
	t.Helper()
	p, err := ts.Notices(context.Background(), api.NoticeRequest{Agent: agent, Limit: limit})
	if err != nil {
		t.Fatalf("notices of %s: %v", agent, err)
	}
	return p
}

func noticedKeys(t *testing.T, ts *testStore) int {
	t.Helper()
	return ts.counts()[string(bucketNoticed)]
}

// Each new message is announced once; mail shown by a listing or read is not news; a message
// that arrives late with an older id is still announced; the marks shrink as copies move on.
func TestNoticesAnnounceEachMessageOnce(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, true)
	if p := notices(t, ts, "bob", 0); len(p.Messages) != 0 || p.More != 0 {
		t.Fatalf("notices of an empty mailbox = %+v", p)
	}
	m1 := ts.send("alice", []string{"bob"}, "one", "1").ID
	m2 := ts.send("alice", []string{"bob", "carol"}, "two", "2").ID
	p := notices(t, ts, "bob", 0)
	if !slices.Equal(ids(p.Messages), []string{m1, m2}) || p.More != 0 || p.Messages[0].Subject != "one" {
		t.Fatalf("first notice = %+v, want %s and %s", p, m1, m2)
	}
	if !slices.Equal(states(p.Messages), []string{"delivered", "delivered"}) {
		t.Fatalf("states %v: a notice moves no copy", states(p.Messages))
	}
	if p := notices(t, ts, "bob", 0); len(p.Messages) != 0 {
		t.Fatalf("second notice = %+v, want nothing (announced already)", p)
	}
	// carol's notice is her own.
	if p := notices(t, ts, "carol", 0); !slices.Equal(ids(p.Messages), []string{m2}) {
		t.Fatalf("carol's notice = %+v", p)
	}

	// Mail listed before any notice (moved to notified) is not announced; a late message with
	// an older id than everything announced is.
	m3 := ts.send("alice", []string{"bob"}, "three", "3").ID
	if _, err := ts.InboxPage(ctx, api.InboxRequest{Agent: "bob", Since: m2}); err != nil {
		t.Fatal(err)
	}
	late := Message{ID: ts.ulids.New(ts.clock.Now().Add(-24 * 3600 * 1e9)), TS: mbx.ISOTime(ts.clock.Now()), From: "dave@beta",
		To: []string{"bob@alpha"}, Subject: "late", Body: "queued a day", Kind: "message", Origin: "beta"}
	if late.ID > m1 {
		t.Fatalf("test setup: %s should sort before %s", late.ID, m1)
	}
	ts.receive(late, "bob")
	if p := notices(t, ts, "bob", 0); !slices.Equal(ids(p.Messages), []string{late.ID}) {
		t.Fatalf("notice after a listing and a late message = %v, want only %s (not %s)", ids(p.Messages), late.ID, m3)
	}

	// Reading announced mail forgets its mark (the copy never returns to delivered).
	if noticedKeys(t, ts) != 4 { // bob: m1, m2, late; carol: m2
		t.Fatalf("noticed marks = %d, want 4", noticedKeys(t, ts))
	}
	for _, id := range []string{m1, m2, late.ID} {
		if _, err := ts.Read(ctx, api.ReadRequest{ID: id, Agent: "bob"}); err != nil {
			t.Fatal(err)
		}
	}
	if p := notices(t, ts, "bob", 0); len(p.Messages) != 0 {
		t.Fatalf("notice after reading = %+v", p)
	}
	if noticedKeys(t, ts) != 1 {
		t.Fatalf("noticed marks after bob read his = %d, want carol's 1", noticedKeys(t, ts))
	}

	// Limit: the newest are listed, the others counted, and all are announced.
	var want []string
	for range 5 {
		want = append(want, ts.send("alice", []string{"bob"}, "many", "x").ID)
	}
	p = notices(t, ts, "bob", 2)
	if !slices.Equal(ids(p.Messages), want[3:]) || p.More != 3 {
		t.Fatalf("limited notice = %v more %d, want %v more 3", ids(p.Messages), p.More, want[3:])
	}
	if p := notices(t, ts, "bob", 0); len(p.Messages) != 0 || p.More != 0 {
		t.Fatalf("notice after a limited one = %+v, want nothing", p)
	}
}

func TestNoticesRefuseBadInput(t *testing.T) {
	ts := newTestStore(t, true)
	before := ts.counts()
	for _, req := range []api.NoticeRequest{{Agent: ""}, {Agent: "Bob"}, {Agent: "bob", Limit: -1}, {Agent: "bob", Limit: api.MaxPage + 1}} {
		if _, err := ts.Notices(context.Background(), req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Notices(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	if after := ts.counts(); !maps.Equal(before, after) {
		t.Errorf("a refused request changed the store: %v → %v", before, after)
	}
}
