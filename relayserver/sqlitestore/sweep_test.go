package sqlitestore

import (
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

func TestExpiryPrimitives(t *testing.T) {
	s := openT(t, t.TempDir())
	a, b, tgt := key(1), key(2), key(3)
	at := t0Bench.UnixMilli()
	seq1 := insert(t, s, item(tgt, a, "i1", "one", at))
	seq2 := insert(t, s, item(tgt, b, "i2", "three", at+10))
	insert(t, s, item(tgt, a, "i3", "fifty", at+20))
	exp := time.UnixMilli(at + 14*86400_000 + 10)

	err := s.Update(ctx, func(tx relayserver.Tx) error {
		got, err := tx.ExpiredItems(exp, 10)
		if err != nil {
			return err
		}
		if len(got) != 2 || got[0].Seq != seq1 || got[1].Seq != seq2 || got[0].ItemID != "i1" ||
			got[0].Kind != relayserver.KindEnvelope || !got[0].AcceptedAt.Equal(time.UnixMilli(at)) {
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
		n, err := tx.PruneDedup(time.UnixMilli(at+20), 10)
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
		if n, err := tx.PruneDedup(time.UnixMilli(at+10), 1); err != nil || n != 1 {
			t.Errorf("PruneDedup = %d, %v, want 1", n, err)
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
}
