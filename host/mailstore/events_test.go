package mailstore

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
)

// next takes the event waiting on ch, failing when there is none (events are sent at commit,
// before the writer returns, so one that is due is already buffered).
func next(t *testing.T, ch <-chan api.MailEvent) api.MailEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed")
		}
		return ev
	default:
		t.Fatal("no event buffered")
	}
	return api.MailEvent{}
}

func none(t *testing.T, ch <-chan api.MailEvent) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		t.Fatalf("unexpected event %+v (open %v)", ev, ok)
	default:
	}
}

// Every copy a commit delivers is one event for the subscribers of its agent (and of all
// agents), with the message's thread; a copy the agent holds already and a rolled-back delivery
// are none.
func TestMailEventsAtCommit(t *testing.T) {
	ts := newTestStore(t, true)
	ctx := t.Context()
	bob, err := ts.MailEvents(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	all, err := ts.MailEvents(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	m := fromBeta(ts, "hello")
	ts.receive(m, "bob")
	if ev := next(t, bob); ev != (api.MailEvent{Agent: "bob", ID: m.ID, Thread: m.ID, From: "ann@beta"}) {
		t.Errorf("bob's event %+v", ev)
	}
	next(t, all)
	ts.receive(m, "bob") // bob holds it already
	none(t, bob)
	none(t, all)

	sent := ts.send("carol", []string{"bob", "dan"}, "two copies", "x")
	if ev := next(t, bob); ev.ID != sent.ID || ev.Agent != "bob" || ev.From != "carol@alpha" {
		t.Errorf("bob's event %+v", ev)
	}
	none(t, bob)
	got := map[string]bool{next(t, all).Agent: true, next(t, all).Agent: true}
	if !got["bob"] || !got["dan"] {
		t.Errorf("all-agents subscriber saw %v, want bob and dan", got)
	}

	reply := Message{ID: ts.ulids.New(ts.clock.Now()), TS: m.TS, From: "ann@beta", To: []string{"bob@alpha"},
		Subject: "re", Body: "b", Kind: "reply", Thread: m.ID, Origin: "beta"}
	boom := errors.New("rolled back")
	if err := ts.db.Update(func(tx *bbolt.Tx) error {
		if err := ts.DeliverTx(tx, &reply, []string{"bob"}, ts.clock.Now()); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	none(t, bob)
	ts.receive(reply, "bob")
	if ev := next(t, bob); ev.ID != reply.ID || ev.Thread != m.ID {
		t.Errorf("reply's event %+v, want thread %s", ev, m.ID)
	}
}

// A subscriber that does not read loses the events past its buffer, and the next one it gets
// says how many; the writer never waits for it.
func TestMailEventsLostWhenBehind(t *testing.T) {
	ts := newTestStore(t, true)
	ch, err := ts.MailEvents(t.Context(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	for range eventBuffer + 3 {
		ts.send("carol", []string{"bob"}, "s", "b")
	}
	for i := range eventBuffer {
		if ev := next(t, ch); ev.Lost != 0 {
			t.Fatalf("event %d: lost %d", i, ev.Lost)
		}
	}
	none(t, ch)
	ts.send("carol", []string{"bob"}, "s", "b")
	if ev := next(t, ch); ev.Lost != 3 {
		t.Errorf("lost %d, want 3", ev.Lost)
	}
	ts.send("carol", []string{"bob"}, "s", "b")
	if ev := next(t, ch); ev.Lost != 0 {
		t.Errorf("lost %d after catching up, want 0", ev.Lost)
	}
}

// The channel closes when the subscriber's context ends and when the store closes; a closed
// store and a bad agent name refuse new subscriptions.
func TestMailEventsEnd(t *testing.T) {
	ts := newTestStore(t, true)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := ts.MailEvents(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, ok := <-ch; ok {
		t.Error("channel open after its context ended")
	}
	if _, err := ts.MailEvents(t.Context(), "Bad Name"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("bad agent name: %v, want ErrInvalid", err)
	}
	ch, err = ts.MailEvents(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	ts.Close()
	if _, ok := <-ch; ok {
		t.Error("channel open after the store closed")
	}
	if _, err := ts.MailEvents(t.Context(), "bob"); !errors.Is(err, api.ErrClosed) {
		t.Errorf("closed store: %v, want ErrClosed", err)
	}
}
