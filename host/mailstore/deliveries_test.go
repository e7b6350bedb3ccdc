package mailstore

import (
	"context"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/failpoint"
)

// deliveries maps the ids of bob's mail (all of it) to the delivery count the store shows.
func (ts *testStore) deliveries(agent string) map[string]int {
	ts.t.Helper()
	msgs, err := ts.Inbox(context.Background(), agent, true)
	if err != nil {
		ts.t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range msgs {
		out[m.ID] = m.Deliveries
	}
	return out
}

// Every copy shows a delivery count of 1, however often the same message is handed to DeliverTx,
// in every listing of it (inbox, a page, read, ack, search).
func TestDeliveryCountIsOnePerCopy(t *testing.T) {
	ts := newTestStore(t, true)
	ctx := context.Background()
	m := fromBeta(ts, "counted once")
	ts.receive(m, "bob")
	ts.receive(m, "bob", "carol") // a repeat for bob, the first copy for carol
	local := ts.send("carol", []string{"bob"}, "local", "counted too")
	for _, a := range []string{"bob", "carol"} {
		for id, n := range ts.deliveries(a) {
			if n != 1 {
				t.Errorf("%s's copy of %s: deliveries %d, want 1", a, id, n)
			}
		}
	}
	page, err := ts.InboxPage(ctx, api.InboxRequest{Agent: "bob", All: true, Limit: 10})
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("page = %+v, %v", page, err)
	}
	for _, got := range page.Messages {
		if got.Deliveries != 1 {
			t.Errorf("page: %s deliveries %d, want 1", got.ID, got.Deliveries)
		}
	}
	r, err := ts.Read(ctx, api.ReadRequest{Agent: "bob", ID: m.ID})
	if err != nil || r.Deliveries != 1 {
		t.Errorf("read = deliveries %d, %v; want 1", r.Deliveries, err)
	}
	a, err := ts.Ack(ctx, api.AckRequest{Agent: "bob", ID: local.ID})
	if err != nil || a.Deliveries != 1 {
		t.Errorf("ack = deliveries %d, %v; want 1", a.Deliveries, err)
	}
	found, err := ts.Search(ctx, api.SearchRequest{Agent: "bob", Query: "counted"})
	if err != nil || len(found.Messages) != 2 {
		t.Fatalf("search = %+v, %v", found, err)
	}
	for _, got := range found.Messages {
		if got.Deliveries != 1 {
			t.Errorf("search: %s deliveries %d, want 1", got.ID, got.Deliveries)
		}
	}
}

// With the dedup failpoint on, a repeat puts the copy again: the count says 2 and the copy is
// back to delivered (unread) although the agent had read it, which is what the oracles look for.
func TestSkipDedupFailpointRedelivers(t *testing.T) {
	ts := newTestStore(t, true)
	ctx := context.Background()
	m := fromBeta(ts, "twice")
	ts.receive(m, "bob")
	if _, err := ts.Read(ctx, api.ReadRequest{Agent: "bob", ID: m.ID}); err != nil {
		t.Fatal(err)
	}
	defer failpoint.Enable(FailSkipDedup, failpoint.Error)()
	ts.receive(m, "bob")
	msgs, err := ts.Inbox(ctx, "bob", true)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("inbox = %+v, %v", msgs, err)
	}
	if got := msgs[0]; got.Deliveries != 2 || got.State != "notified" {
		t.Errorf("after a repeat past the dedup: deliveries %d, state %s; want 2, notified (back from read)", got.Deliveries, got.State)
	}
}
