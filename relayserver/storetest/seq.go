package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

func testSeqNeverReused(t *testing.T, s relayserver.Store) {
	tgt, snd := Key(1), Key(2)
	steps := []struct {
		id   string
		at   int64
		want int64
	}{
		{"a", 1000, 1000}, // empty queue: now_ms
		{"b", 1000, 1001}, // same ms: next_seq
		{"c", 500, 1002},  // clock went back: next_seq
		{"d", 5000, 5000}, // clock ahead: now_ms
	}
	for _, st := range steps {
		if got := Insert(t, s, NewItem(tgt, snd, st.id, st.id, st.at)); got != st.want {
			t.Fatalf("seq of %s at %d = %d, want %d", st.id, st.at, got, st.want)
		}
	}
	if h, err := s.Head(ctx, tgt); err != nil || h.HeadSeq != 5000 {
		t.Fatalf("Head = %+v, %v; want head 5000", h, err)
	}
	Ack(t, s, tgt, 5000)
	// The queue is empty, but its seqs are spent.
	if got := Insert(t, s, NewItem(tgt, snd, "e", "e", 10)); got != 5001 {
		t.Fatalf("seq after ack = %d, want 5001", got)
	}
	// Another target has a counter of its own.
	if got := Insert(t, s, NewItem(Key(3), snd, "a", "a", 700)); got != 700 {
		t.Fatalf("seq of another target = %d, want 700", got)
	}
	// A failed unit's seq was never shown to anyone; whatever a backend does with it, the next
	// seq stays above every committed one.
	_ = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(NewItem(tgt, snd, "gone", "g", 10)); err != nil {
			return err
		}
		return errors.New("boom")
	})
	if got := Insert(t, s, NewItem(tgt, snd, "f", "f", 10)); got <= 5001 {
		t.Fatalf("seq after a failed unit = %d, want above 5001", got)
	}
}

func testSeqNotReusedAfterDelete(t *testing.T, s relayserver.Store) {
	tgt, snd := Key(1), Key(2)
	seq := Insert(t, s, NewItem(tgt, snd, "a", "a", 9000))
	err := s.Update(ctx, func(tx relayserver.Tx) error { _, err := tx.DeleteItem(tgt, seq); return err })
	if err != nil {
		t.Fatal(err)
	}
	if got := Insert(t, s, NewItem(tgt, snd, "b", "b", 1)); got != seq+1 {
		t.Fatalf("seq after the last item expired = %d, want %d", got, seq+1)
	}
	// A rotation's moved items get new seqs after the new key's head and at or above its time.
	old, nw := Key(5), Key(6)
	for _, k := range []string{old, nw} {
		if err := enrol(t, s, relayserver.Enrolment{HostPubkey: k, HostName: "h" + k[40:43],
			AuthorizedBy: "host-key", EnrolledAt: time.UnixMilli(1)}); err != nil {
			t.Fatal(err)
		}
	}
	Insert(t, s, NewItem(old, snd, "o", "o", 100))
	n := Insert(t, s, NewItem(nw, snd, "n", "n", 50))
	Ack(t, s, nw, n)
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: old, NewPubkey: nw, At: time.UnixMilli(70)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p := pullAll(t, s, nw)
	if len(p.Items) != 1 || p.Items[0].Seq != 70 || p.HeadSeq != 70 {
		t.Fatalf("after rotation at 70 the new key holds %+v, want item o at seq 70", p)
	}
	if got := Insert(t, s, NewItem(nw, snd, "n2", "n2", 60)); got != 71 {
		t.Fatalf("seq after rotation = %d, want 71", got)
	}
}

func testDuplicateInsertRefused(t *testing.T, s relayserver.Store) {
	Insert(t, s, NewItem(Key(1), Key(2), "x", "w", 1))
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.InsertItem(NewItem(Key(1), Key(2), "x", "w", 2))
		return err
	})
	if !errors.Is(err, relayserver.ErrDuplicate) {
		t.Fatalf("second insert = %v, want ErrDuplicate", err)
	}
	// The refusal changes nothing, even for a caller that goes on in the same unit, and even
	// when the repeat carries other bytes (a conflict the relay finds by the stored hash).
	before, _ := s.Head(ctx, Key(1))
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(NewItem(Key(1), Key(2), "x", "w", 5000)); !errors.Is(err, relayserver.ErrDuplicate) {
			return fmt.Errorf("repeat insert = %v, want ErrDuplicate", err)
		}
		if _, err := tx.InsertItem(NewItem(Key(1), Key(2), "x", "other", 6000)); !errors.Is(err, relayserver.ErrDuplicate) {
			return fmt.Errorf("conflicting insert = %v, want ErrDuplicate", err)
		}
		d, err := tx.Dedup(Key(2), "x", Key(1))
		if err != nil || d.WireHash != Hash([]byte("w")) || d.Seq != before.HeadSeq || !d.AcceptedAt.Equal(time.UnixMilli(1)) {
			return fmt.Errorf("dedup after refused inserts = %+v, %v; want the first accept kept", d, err)
		}
		u, err := tx.Usage(Key(1), Key(2))
		if err != nil {
			return err
		}
		if want := (relayserver.Counts{Items: 1, Bytes: 1}); u.Target != want || u.Sender != want {
			return fmt.Errorf("usage after a refused insert = %+v, want %+v for both", u, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Head(ctx, Key(1)); after != before {
		t.Fatalf("head after a refused insert = %+v, want %+v", after, before)
	}
	// Same id for another target, or from another sender, is another row.
	Insert(t, s, NewItem(Key(3), Key(2), "x", "w", 3))
	Insert(t, s, NewItem(Key(1), Key(4), "x", "w", 3))
	if p := pullAll(t, s, Key(1)); len(p.Items) != 2 {
		t.Fatalf("target 1 holds %d items, want 2", len(p.Items))
	}
}

func testFailedUnitStoresNothing(t *testing.T, s relayserver.Store) {
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(NewItem(Key(1), Key(2), "a", "a", 1)); err != nil {
			return err
		}
		if _, err := tx.InsertItem(NewItem(Key(3), Key(2), "a", "a", 1)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	for _, tgt := range []string{Key(1), Key(3)} {
		p, _ := s.Pull(ctx, tgt, 0, 10, 1<<20)
		if len(p.Items) != 0 || p.HeadSeq != 0 {
			t.Fatalf("after failed unit, target %s has %+v, want nothing", tgt, p)
		}
	}
	// A failed nested unit undoes only itself.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(NewItem(Key(1), Key(2), "keep", "k", 1)); err != nil {
			return err
		}
		if err := tx.Unit(func(tx relayserver.Tx) error {
			if _, err := tx.InsertItem(NewItem(Key(1), Key(2), "drop", "d", 1)); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Errorf("nested Unit = %v, want boom", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Pull(ctx, Key(1), 0, 10, 1<<20)
	if len(p.Items) != 1 || p.Items[0].ItemID != "keep" {
		t.Fatalf("after nested failure got %+v, want only keep", p.Items)
	}
	u := usage(t, s, Key(1), Key(2))
	if u.Target.Items != 1 || u.Target.Bytes != 1 {
		t.Fatalf("usage after nested failure = %+v, want 1 item, 1 byte", u)
	}
	// A panicking unit fails alone too.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(NewItem(Key(1), Key(2), "panic", "p", 1)); err != nil {
			return err
		}
		panic("unit bug")
	})
	if err == nil {
		t.Fatalf("a panicking unit reported success")
	}
	if p := pullAll(t, s, Key(1)); len(p.Items) != 1 {
		t.Fatalf("after a panicking unit the queue holds %d items, want 1", len(p.Items))
	}
}

// testFailedUnitAmongConcurrentUnits runs many units at once, so a backend that groups them
// into one commit has failing and succeeding units in the same group: each failure rolls back
// alone and every success is stored with its own seq.
func testFailedUnitAmongConcurrent(t *testing.T, s relayserver.Store) {
	const n = 40
	tgt := Key(9)
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, n)
	seqs := make([]int64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(ctx, func(tx relayserver.Tx) error {
				seq, err := tx.InsertItem(NewItem(tgt, Key(100+i), "x", fmt.Sprint(i), T0.UnixMilli()))
				if err != nil {
					return err
				}
				if i%3 == 0 {
					return boom
				}
				seqs[i] = seq
				return nil
			})
		}()
	}
	wg.Wait()
	stored := map[int64]string{}
	for i, err := range errs {
		switch {
		case i%3 == 0 && !errors.Is(err, boom):
			t.Fatalf("unit %d = %v, want boom", i, err)
		case i%3 != 0 && err != nil:
			t.Fatalf("unit %d: %v", i, err)
		case i%3 != 0:
			if _, ok := stored[seqs[i]]; ok {
				t.Fatalf("seq %d reported to two units", seqs[i])
			}
			stored[seqs[i]] = Key(100 + i)
		}
	}
	p := pullAll(t, s, tgt)
	if len(p.Items) != len(stored) {
		t.Fatalf("queue holds %d items, want the %d that succeeded", len(p.Items), len(stored))
	}
	for _, it := range p.Items {
		if stored[it.Seq] != it.Sender {
			t.Fatalf("item at seq %d is from %s, want the unit told that seq (%s)", it.Seq, it.Sender, stored[it.Seq])
		}
	}
	if u := usage(t, s, tgt, Key(101)); u.Target.Items != int64(len(stored)) || u.Sender.Items != 1 {
		t.Fatalf("usage = %+v, want %d items, 1 from sender 101", u, len(stored))
	}
}
