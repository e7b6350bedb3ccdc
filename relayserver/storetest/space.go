package storetest

import (
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// senderDedup is the dedup rows charged to sender, as Admission reads them.
func senderDedup(t *testing.T, s relayserver.Store, sender string) int64 {
	t.Helper()
	var n int64
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		a, err := tx.Admission(sender, "probe", Key(999))
		n = a.SenderDedup
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func dedupRows(t *testing.T, s relayserver.Store) int64 {
	t.Helper()
	ur, ok := s.(relayserver.UsageReporter)
	if !ok {
		t.Fatal("the store does not implement relayserver.UsageReporter")
	}
	n, err := ur.DedupRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testDedupCharge: every dedup row is charged to its sender and counted in the totals; acks leave
// the charge (tombstones), pruning takes it off; a prune with minRows touches only senders
// charged at least that many rows; rotation moves the charge with the key.
func testDedupCharge(t *testing.T, s relayserver.Store) {
	a, b, c := Key(1), Key(2), Key(3)
	at := T0.UnixMilli()
	for i := range 5 {
		Insert(t, s, NewItem(a, a, "a"+string(rune('0'+i)), "wire", at+int64(i)))
	}
	Insert(t, s, NewItem(a, b, "b0", "wire", at))
	Insert(t, s, NewItem(c, b, "b0", "wire", at)) // the same id for another target: another row
	if got := senderDedup(t, s, a); got != 5 {
		t.Errorf("a's dedup rows = %d, want 5", got)
	}
	if got := senderDedup(t, s, b); got != 2 {
		t.Errorf("b's dedup rows = %d, want 2", got)
	}
	head := pullAll(t, s, a).HeadSeq
	Ack(t, s, a, head)
	if got := senderDedup(t, s, a); got != 5 {
		t.Errorf("a's dedup rows after the ack = %d, want 5 (tombstones stay charged)", got)
	}
	if got := dedupRows(t, s); got != 7 {
		t.Errorf("DedupRows = %d, want 7", got)
	}
	// Only senders with at least 3 rows: a's tombstones go (2 at most), b's stays.
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		n, err := tx.PruneDedup(time.UnixMilli(at+10), 3, 2)
		if err != nil || n != 2 {
			t.Errorf("PruneDedup(minRows 3, limit 2) = %d, %v, want 2", n, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, gotB := senderDedup(t, s, a), senderDedup(t, s, b); got != 3 || gotB != 2 {
		t.Errorf("after the over-cap prune: a %d, b %d dedup rows, want 3, 2", got, gotB)
	}
	// Rotation: the rows for a are copied for a2, and a's rows as a sender (those copies
	// included) follow it to its new key.
	a2 := Key(4)
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: a, HostName: "a", AuthorizedBy: "host-key", EnrolledAt: T0}); err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: a, NewPubkey: a2, At: T0.Add(time.Minute)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, got2 := senderDedup(t, s, a), senderDedup(t, s, a2); got != 0 || got2 != 6 {
		t.Errorf("after rotation: old key %d, new key %d dedup rows, want 0, 6", got, got2)
	}
	// b's row for a was copied to a2: b holds one more.
	if got := senderDedup(t, s, b); got != 3 {
		t.Errorf("b's dedup rows after a's rotation = %d, want 3 (its row for a copied to a2)", got)
	}
	if got := dedupRows(t, s); got != 6+3 {
		t.Errorf("DedupRows after rotation = %d, want 9", got)
	}
}

// testReclaim: Reclaim deletes the key's queue, what it queued for others and its dedup rows, and
// the counters follow; other senders' rows and items stay.
func testReclaim(t *testing.T, s relayserver.Store) {
	m, h := Key(1), Key(2)
	at := T0.UnixMilli()
	Insert(t, s, NewItem(m, m, "m0", "mmmm", at))
	Insert(t, s, NewItem(m, m, "m1", "mmmm", at))
	Ack(t, s, m, pullAll(t, s, m).HeadSeq)
	Insert(t, s, NewItem(m, m, "m2", "mmmm", at))  // queued for itself
	Insert(t, s, NewItem(h, m, "m3", "mmmmm", at)) // queued for h
	Insert(t, s, NewItem(m, h, "h0", "hh", at))    // h's mail for m
	Insert(t, s, NewItem(h, h, "h1", "hhh", at))   // h's own
	var res relayserver.ReclaimResult
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		var err error
		res, err = tx.Reclaim(m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (relayserver.ReclaimResult{Items: 3, Bytes: 4 + 5 + 2, DedupRows: 4}); res != want {
		t.Errorf("Reclaim = %+v, want %+v", res, want)
	}
	if p := pullAll(t, s, m); len(p.Items) != 0 {
		t.Errorf("m's queue after reclaim holds %d items", len(p.Items))
	}
	if p := pullAll(t, s, h); len(p.Items) != 1 || p.Items[0].ItemID != "h1" {
		t.Errorf("h's queue after reclaim = %+v, want h1 only", ids(p))
	}
	if u := usage(t, s, h, m); u.Target != (relayserver.Counts{Items: 1, Bytes: 3}) || u.Sender != (relayserver.Counts{}) {
		t.Errorf("h's usage after reclaim = %+v", u)
	}
	if u := usage(t, s, m, h); u.Target != (relayserver.Counts{}) {
		t.Errorf("m's usage after reclaim = %+v", u)
	}
	if got, gotH := senderDedup(t, s, m), senderDedup(t, s, h); got != 0 || gotH != 2 {
		t.Errorf("dedup rows after reclaim: m %d, h %d, want 0, 2", got, gotH)
	}
	tot, err := s.Totals(ctx)
	if err != nil || tot != (relayserver.Counts{Items: 1, Bytes: 3}) {
		t.Errorf("Totals after reclaim = %+v, %v", tot, err)
	}
	// The seq is never reused: a new item for m lands above the old head.
	if seq := Insert(t, s, NewItem(m, h, "h2", "x", at)); seq <= at+3 {
		t.Errorf("seq after reclaim = %d, want above the old ones", seq)
	}
}

func ids(p relayserver.Page) []string {
	var out []string
	for _, it := range p.Items {
		out = append(out, it.ItemID)
	}
	return out
}
