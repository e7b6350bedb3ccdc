package mailstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// fromBeta is a message from agent ann of host beta to bob of alpha, as the receive path stores
// it.
func fromBeta(ts *testStore, subject string) Message {
	now := ts.clock.Now()
	return Message{ID: ts.ulids.New(now), TS: mbx.ISOTime(now), From: "ann@beta", To: []string{"bob@alpha"},
		Subject: subject, Body: "b", Kind: "message", Origin: "beta"}
}

// Mail from another host gets a receipt queued for its origin at delivery and at every move
// forward, in the transaction of the move, each with the next seq; a move back or a repeat queues
// nothing. Local mail queues none.
func TestReceiptAtEveryMoveOfMailFromAnotherHost(t *testing.T) {
	ts := newTestStore(t, true)
	ctx := context.Background()
	m := fromBeta(ts, "hello")
	ts.receive(m, "bob")
	ts.receive(m, "bob") // delivered again: bob holds it already
	ts.send("carol", []string{"bob"}, "local", "no receipts for this one")
	if _, err := ts.Inbox(ctx, "bob", false); err != nil { // both copies shown: notified
		t.Fatal(err)
	}
	if _, err := ts.Read(ctx, api.ReadRequest{Agent: "bob", ID: m.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Read(ctx, api.ReadRequest{Agent: "bob", ID: m.ID}); err != nil { // no move
		t.Fatal(err)
	}
	if _, err := ts.Ack(ctx, api.AckRequest{Agent: "bob", ID: m.ID, Note: "done"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Ack(ctx, api.AckRequest{Agent: "bob", ID: m.ID, Note: "done, really"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"beta " + m.ID + " bob 1 delivered",
		"beta " + m.ID + " bob 2 notified",
		"beta " + m.ID + " bob 3 read",
		"beta " + m.ID + " bob 4 acked done",
		"beta " + m.ID + " bob 5 acked done, really", // a new note on an acked copy is a move
	}
	if got := ts.receipts(); !slices.Equal(got, want) {
		t.Errorf("receipts queued:\n%q\nwant\n%q", got, want)
	}
	c, found, err := ts.copyOf("bob", m.ID)
	if err != nil || !found || c.Seq != 5 || c.State != mbx.ReceiptAcked || c.Note != "done, really" {
		t.Errorf("bob's copy = %+v %v %v, want acked, seq 5, the last note", c, found, err)
	}
	if ts.fake.kicked() == 0 {
		t.Error("the host was never told that receipts were queued")
	}
}

// ResendReceiptsTx queues the current receipt again, with the next seq, for the copies whose last
// receipt is no longer on its way, and only for copies of mail from that origin.
func TestResendReceiptsSkipsThoseOnTheirWay(t *testing.T) {
	ts := newTestStore(t, true)
	m := fromBeta(ts, "hello")
	ts.receive(m, "bob", "carol")
	var n int
	err := ts.db.Update(func(tx *bbolt.Tx) error {
		var err error
		n, err = ts.ResendReceiptsTx(tx, m.ID, "beta", []string{"bob", "carol", "dave"}, func(agent string, seq int64) (bool, error) {
			if seq != 1 {
				t.Errorf("%s's last receipt has seq %d, want 1", agent, seq)
			}
			return agent == "carol", nil
		})
		return err
	})
	if err != nil || n != 1 {
		t.Fatalf("resent %d (%v), want 1: bob's", n, err)
	}
	want := []string{
		"beta " + m.ID + " bob 1 delivered",
		"beta " + m.ID + " bob 2 delivered",
		"beta " + m.ID + " carol 1 delivered",
	}
	if got := ts.receipts(); !slices.Equal(got, want) {
		t.Errorf("receipts queued:\n%q\nwant\n%q", got, want)
	}
	err = ts.db.Update(func(tx *bbolt.Tx) error {
		n, err = ts.ResendReceiptsTx(tx, m.ID, "gamma", []string{"bob"}, func(string, int64) (bool, error) { return false, nil })
		return err
	})
	if err != nil || n != 0 {
		t.Errorf("resent %d (%v) for another origin, want none", n, err)
	}
}

// Close ends the waits in progress with api.ErrClosed and refuses new ones.
func TestCloseEndsWaits(t *testing.T) {
	ts := newTestStore(t, true)
	ctx := context.Background()
	errs := make(chan error, 2)
	go func() {
		_, err := ts.Wait(ctx, "bob", time.Minute)
		errs <- err
	}()
	go func() {
		_, err := ts.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: time.Minute})
		errs <- err
	}()
	for i := 0; ts.Waiters() != 2; i++ { // both in progress, not refused at their start
		if i == 3000 {
			t.Fatalf("%d waits parked, want 2", ts.Waiters())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts.Close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, api.ErrClosed) {
				t.Errorf("a wait ended with %v, want api.ErrClosed", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Close did not end a wait")
		}
	}
	if _, err := ts.Wait(ctx, "bob", 0); !errors.Is(err, api.ErrClosed) {
		t.Errorf("Wait after Close: %v, want api.ErrClosed", err)
	}
	if n := ts.Waiters(); n != 0 {
		t.Errorf("%d waits still counted as parked after they ended", n)
	}
}

// A delivery whose transaction rolls back wakes no one and leaves nothing.
func TestRolledBackDeliveryLeavesNothing(t *testing.T) {
	ts := newTestStore(t, true)
	before := ts.counts()
	boom := errors.New("boom")
	m := fromBeta(ts, "lost")
	err := ts.db.Update(func(tx *bbolt.Tx) error {
		if err := ts.DeliverTx(tx, &m, []string{"bob"}, ts.clock.Now()); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if after := ts.counts(); !maps.Equal(before, after) {
		t.Errorf("a rolled-back delivery changed the store: %v → %v", before, after)
	}
	p, err := ts.WaitNew(context.Background(), api.WaitRequest{Agent: "bob"})
	if err != nil || len(p.Messages) != 0 {
		t.Errorf("bob's new mail = %v, %v; want none", ids(p.Messages), err)
	}
}

// KnownAgents lists the remote agents the indexes know, of the paired hosts only.
func TestKnownAgentsOfPairedHosts(t *testing.T) {
	ts := newTestStore(t, true)
	ts.receive(fromBeta(ts, "hi"), "bob")
	if err := ts.db.Update(func(tx *bbolt.Tx) error {
		if err := NoteKnownTx(tx, "zed@gamma", "gamma"); err != nil {
			return err
		}
		if err := NoteKnownTx(tx, "liar@delta", "gamma"); err != nil { // gamma cannot vouch for delta
			return err
		}
		return NoteSentTx(tx, "bob", "01KKNTQ2CN9WJ3MR4Q1P12F02T", map[string][]string{"beta": {"cy"}})
	}); err != nil {
		t.Fatal(err)
	}
	ts.fake.peers = []string{"beta", "delta"}
	ks, err := ts.KnownAgents(context.Background())
	var got []string
	for _, k := range ks {
		got = append(got, k.Address)
	}
	if err != nil || !slices.Equal(got, []string{"ann@beta", "cy@beta"}) {
		t.Errorf("known agents = %v (%v), want ann@beta and cy@beta (gamma is not paired)", got, err)
	}
}

func (ts *testStore) copyOf(agent, id string) (c Copy, found bool, err error) {
	err = ts.db.View(func(tx *bbolt.Tx) error {
		c, found, err = CopyTx(tx, agent, id)
		return err
	})
	return c, found, err
}
