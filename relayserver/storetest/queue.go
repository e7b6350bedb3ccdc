package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

func testPullPagesAndAck(t *testing.T, s relayserver.Store) {
	tgt := Key(1)
	var seqs []int64
	for i := range 5 {
		seqs = append(seqs, Insert(t, s, NewItem(tgt, Key(2), fmt.Sprint(i), fmt.Sprintf("%0100d", i), 100)))
	}
	p, err := s.Pull(ctx, tgt, 0, 2, 1<<20)
	if err != nil || len(p.Items) != 2 || !p.More || p.HeadSeq != seqs[4] || p.Items[1].Seq != seqs[1] {
		t.Fatalf("pull limit 2 = %+v, %v", p, err)
	}
	want := NewItem(tgt, Key(2), "0", fmt.Sprintf("%0100d", 0), 100)
	want.Seq = seqs[0]
	if got := p.Items[0]; got.Target != want.Target || got.Seq != want.Seq || got.Kind != want.Kind ||
		got.ItemID != want.ItemID || got.Sender != want.Sender || string(got.Wire) != string(want.Wire) ||
		got.WireHash != want.WireHash || !got.AcceptedAt.Equal(want.AcceptedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("pulled item = %+v\nwant %+v", got, want)
	}
	// Byte cap: 250 bytes fits two 100-byte items.
	p, _ = s.Pull(ctx, tgt, seqs[1], 10, 250)
	if len(p.Items) != 2 || !p.More || p.Items[0].Seq != seqs[2] {
		t.Fatalf("pull 250 bytes = %d items more=%v, want 2, true", len(p.Items), p.More)
	}
	// At least one item even when it alone is over the cap.
	p, _ = s.Pull(ctx, tgt, seqs[1], 10, 10)
	if len(p.Items) != 1 || !p.More {
		t.Fatalf("pull 10 bytes = %d items, want 1", len(p.Items))
	}
	// Exactly the rest: no more.
	p, _ = s.Pull(ctx, tgt, seqs[1], 3, 1<<20)
	if len(p.Items) != 3 || p.More {
		t.Fatalf("pull of the last 3 = %d items more=%v, want 3, false", len(p.Items), p.More)
	}
	p, _ = s.Pull(ctx, tgt, seqs[4], 10, 1<<20)
	if len(p.Items) != 0 || p.More {
		t.Fatalf("pull past head = %+v, want empty", p)
	}

	var res relayserver.AckResult
	err = s.Update(ctx, func(tx relayserver.Tx) error { res, err = tx.Ack(tgt, seqs[2]); return err })
	if err != nil || res.Deleted != 3 || res.AckedThrough != seqs[2] || res.HeadSeq != seqs[4] {
		t.Fatalf("ack = %+v, %v; want 3 deleted", res, err)
	}
	if u := usage(t, s, tgt, Key(2)); u.Target.Items != 2 || u.Sender.Bytes != 200 {
		t.Fatalf("usage after ack = %+v, want 2 items, 200 bytes", u)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error { _, err := tx.Ack(tgt, seqs[4]+1); return err })
	if !errors.Is(err, relayserver.ErrBadAck) {
		t.Fatalf("ack beyond head = %v, want ErrBadAck", err)
	}
	h, _ := s.Head(ctx, tgt)
	if h.AckedThrough != seqs[2] {
		t.Fatalf("acked_through after BAD_ACK = %d, want %d", h.AckedThrough, seqs[2])
	}
	// An older ack deletes nothing and never moves acked_through back.
	if res := Ack(t, s, tgt, seqs[0]); res.Deleted != 0 || res.AckedThrough != seqs[2] {
		t.Fatalf("repeated older ack = %+v, want nothing deleted, acked_through %d", res, seqs[2])
	}
	if res := Ack(t, s, tgt, seqs[4]); res.Deleted != 2 {
		t.Fatalf("ack of the rest = %+v, want 2 deleted", res)
	}
	if u := usage(t, s, tgt, Key(2)); u != (relayserver.Usage{}) {
		t.Fatalf("usage of an empty queue = %+v, want zero", u)
	}
	if p := pullAll(t, s, tgt); len(p.Items) != 0 || p.HeadSeq != seqs[4] || p.AckedThrough != seqs[4] {
		t.Fatalf("pull of the acked queue = %+v, want empty at head %d", p, seqs[4])
	}
	// A target with no history has a zero head.
	if h, err := s.Head(ctx, Key(77)); err != nil || h != (relayserver.Head{}) {
		t.Fatalf("Head of an unknown target = %+v, %v", h, err)
	}
}

func testExpiryPrimitives(t *testing.T, s relayserver.Store) {
	a, b, tgt := Key(1), Key(2), Key(3)
	at := T0.UnixMilli()
	seq1 := Insert(t, s, NewItem(tgt, a, "i1", "one", at))
	seq2 := Insert(t, s, NewItem(tgt, b, "i2", "three", at+10))
	Insert(t, s, NewItem(tgt, a, "i3", "fifty", at+20))
	exp := time.UnixMilli(at + 14*86400_000 + 10)

	err := s.Update(ctx, func(tx relayserver.Tx) error {
		got, err := tx.ExpiredItems(exp, 10)
		if err != nil {
			return err
		}
		if len(got) != 2 || got[0].Seq != seq1 || got[1].Seq != seq2 || got[0].ItemID != "i1" ||
			got[0].Kind != relayserver.KindEnvelope || !got[0].AcceptedAt.Equal(time.UnixMilli(at)) ||
			got[0].Target != tgt || got[0].Sender != a || got[1].WireHash != Hash([]byte("three")) ||
			!got[1].ExpiresAt.Equal(time.UnixMilli(at+10+14*86400_000)) {
			t.Errorf("ExpiredItems = %+v, want i1 and i2", got)
		}
		if got, _ := tx.ExpiredItems(exp, 1); len(got) != 1 || got[0].Seq != seq1 {
			t.Errorf("ExpiredItems limit 1 = %+v, want i1", got)
		}
		n, err := tx.DeleteItem(tgt, seq1)
		if err != nil || n != 3 {
			t.Errorf("DeleteItem = %d, %v, want 3", n, err)
		}
		if n, err := tx.DeleteItem(tgt, seq1); err != nil || n != 0 {
			t.Errorf("DeleteItem again = %d, %v, want 0, nil", n, err)
		}
		u, err := tx.Usage(tgt, a)
		if err != nil {
			return err
		}
		if want := (relayserver.Usage{Target: relayserver.Counts{Items: 2, Bytes: 10}, Sender: relayserver.Counts{Items: 1, Bytes: 5}}); u != want {
			t.Errorf("usage after delete = %+v, want %+v", u, want)
		}
		if d, err := tx.Dedup(a, "i1", tgt); err != nil || d.Seq != seq1 {
			t.Errorf("tombstone = %+v, %v, want seq %d kept", d, err, seq1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The tombstone refuses a late retry.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.InsertItem(NewItem(tgt, a, "i1", "one", at+30))
		return err
	})
	if !errors.Is(err, relayserver.ErrDuplicate) {
		t.Fatalf("insert over a tombstone = %v, want ErrDuplicate", err)
	}

	// A failed unit undoes its deletion.
	boom := errors.New("boom")
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.DeleteItem(tgt, seq2); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}

	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if got, _ := tx.ExpiredItems(exp, 10); len(got) != 1 || got[0].Seq != seq2 {
			t.Errorf("after rollback ExpiredItems = %+v, want i2 still there", got)
		}
		// Cutoff past all three rows: only i1's row (its item is gone) may go.
		n, err := tx.PruneDedup(time.UnixMilli(at+20), 0, 10)
		if err != nil || n != 1 {
			t.Errorf("PruneDedup = %d, %v, want 1", n, err)
		}
		if _, err := tx.Dedup(a, "i1", tgt); !errors.Is(err, relayserver.ErrNotFound) {
			t.Errorf("i1 dedup after prune: %v, want ErrNotFound", err)
		}
		if _, err := tx.DeleteItem(tgt, seq2); err != nil {
			return err
		}
		// The cutoff is before i3 and the limit 1: i2 goes, i3 (queued anyway) stays.
		if n, err := tx.PruneDedup(time.UnixMilli(at+10), 0, 1); err != nil || n != 1 {
			t.Errorf("PruneDedup = %d, %v, want 1", n, err)
		}
		if _, err := tx.Dedup(a, "i3", tgt); err != nil {
			t.Errorf("i3 dedup after prune: %v, want kept", err)
		}
		u, err := tx.Usage(tgt, b)
		if err != nil {
			return err
		}
		if want := (relayserver.Usage{Target: relayserver.Counts{Items: 1, Bytes: 5}}); u != want {
			t.Errorf("usage = %+v, want %+v (beta's share row gone)", u, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Expiry never lowers the head: the next seq is above all the deleted ones.
	if got := Insert(t, s, NewItem(tgt, a, "i4", "x", at)); got <= seq2+1 {
		t.Fatalf("seq after expiry = %d, want above %d", got, seq2+1)
	}
}
