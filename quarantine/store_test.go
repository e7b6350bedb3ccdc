package quarantine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

var t0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

const (
	senderA = "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4="
	senderB = "FUXk5FNVq/ofFbA/ybKIH9N0/ClqW29kM2uu0KlMX28="
)

func openTest(t *testing.T) *Store {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := Open(db, &Options{Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entry(seq int64, sender string, cause Cause) Entry {
	return Entry{
		Relay: "https://relay.example", Epoch: "ep1", Seq: seq, ItemID: "item-" + string(rune('a'+seq%26)),
		Kind: "envelope", Sender: sender, Cause: cause, Reason: cause.String() + " item",
		Wire: []byte(`{"v":3,"seq":` + string(rune('0'+seq%10)) + `}`),
	}
}

func put(t *testing.T, s *Store, e Entry) (Entry, bool) {
	t.Helper()
	var held Entry
	var added bool
	err := s.Update(context.Background(), func(tx *Tx) error {
		var err error
		held, added, err = tx.Put(e)
		return err
	})
	if err != nil {
		t.Fatalf("put seq %d: %v", e.Seq, err)
	}
	return held, added
}

func list(t *testing.T, s *Store, f Filter) []Entry {
	t.Helper()
	got, err := s.List(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestPutGetKeepsWireAndFields(t *testing.T) {
	s := openTest(t)
	in := entry(1700000000001, senderA, CauseUndecryptable)
	held, added := put(t, s, in)
	if !added {
		t.Fatal("first put: added = false, want true")
	}
	if held.At != t0 || held.Bytes != len(in.Wire) || len(held.ID) != 64 || held.WireHash == "" {
		t.Fatalf("put filled in At=%v Bytes=%d ID=%q WireHash=%q", held.At, held.Bytes, held.ID, held.WireHash)
	}
	var got Entry
	if err := s.View(context.Background(), func(tx *Tx) error {
		var err error
		got, err = tx.Get(held.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Wire, in.Wire) {
		t.Fatalf("wire = %q, want %q", got.Wire, in.Wire)
	}
	if got.Relay != in.Relay || got.Epoch != in.Epoch || got.Seq != in.Seq || got.ItemID != in.ItemID ||
		got.Kind != in.Kind || got.Sender != in.Sender || got.Cause != in.Cause || got.Reason != in.Reason ||
		!got.At.Equal(t0) {
		t.Fatalf("got %+v, want the fields of %+v", got, in)
	}
}

func TestPutSameItemTwiceKeepsOne(t *testing.T) {
	s := openTest(t)
	first := entry(100, senderA, CauseBadSignature)
	put(t, s, first)
	// The same item pulled again in a new epoch at another seq (a rewind / epoch change).
	again := first
	again.Epoch, again.Seq, again.Reason = "ep2", 5, "other words"
	held, added := put(t, s, again)
	if added {
		t.Fatal("second put of the same item: added = true, want false")
	}
	if held.Epoch != "ep1" || held.Seq != 100 {
		t.Fatalf("held = (%s, %d), want the first entry (ep1, 100)", held.Epoch, held.Seq)
	}
	if got := list(t, s, Filter{}); len(got) != 1 {
		t.Fatalf("list has %d entries, want 1", len(got))
	}
	// Other wire bytes under the same item id are another item: both are kept.
	other := first
	other.Wire = []byte("different bytes")
	if _, added := put(t, s, other); !added {
		t.Fatal("item with other wire bytes: added = false, want true")
	}
	if got := list(t, s, Filter{}); len(got) != 2 {
		t.Fatalf("list has %d entries, want 2", len(got))
	}
}

func TestListOrderAndFilters(t *testing.T) {
	s := openTest(t)
	for _, e := range []Entry{
		entry(30, senderA, CauseUnpaired),
		entry(10, senderB, CauseMalformed),
		entry(20, senderA, CauseUnpaired),
	} {
		put(t, s, e)
	}
	other := entry(5, senderA, CauseRefused)
	other.Relay = "https://other.example"
	put(t, s, other)

	tests := []struct {
		name string
		f    Filter
		want []int64
	}{
		{"all", Filter{}, nil},
		{"relay", Filter{Relay: "https://relay.example"}, []int64{10, 20, 30}},
		{"other relay", Filter{Relay: "https://other.example"}, []int64{5}},
		{"sender", Filter{Relay: "https://relay.example", Sender: senderA}, []int64{20, 30}},
		{"cause", Filter{Cause: CauseMalformed}, []int64{10}},
		{"limit", Filter{Relay: "https://relay.example", Limit: 2}, []int64{10, 20}},
		{"unknown relay", Filter{Relay: "https://nowhere"}, []int64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := list(t, s, tc.f)
			if tc.want == nil {
				if len(got) != 4 {
					t.Fatalf("got %d entries, want 4", len(got))
				}
				return
			}
			var seqs []int64
			for _, e := range got {
				seqs = append(seqs, e.Seq)
				if e.Wire != nil {
					t.Errorf("seq %d: wire listed without WithWire", e.Seq)
				}
			}
			if len(seqs) != len(tc.want) {
				t.Fatalf("seqs = %v, want %v", seqs, tc.want)
			}
			for i := range seqs {
				if seqs[i] != tc.want[i] {
					t.Fatalf("seqs = %v, want %v", seqs, tc.want)
				}
			}
		})
	}
	if got := list(t, s, Filter{Cause: CauseMalformed, WithWire: true}); len(got) != 1 || len(got[0].Wire) == 0 {
		t.Fatalf("WithWire: got %+v, want one entry with its wire", got)
	}
}

func TestReleaseUnpairedRoundTrip(t *testing.T) {
	s := openTest(t)
	put(t, s, entry(20, senderA, CauseUnpaired))
	put(t, s, entry(10, senderA, CauseUnpaired))
	put(t, s, entry(15, senderB, CauseUnpaired))
	put(t, s, entry(12, senderA, CauseBadSignature)) // same sender, not waiting for pairing

	var senders []string
	if err := s.View(context.Background(), func(tx *Tx) error {
		var err error
		senders, err = tx.UnpairedSenders()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(senders) != 2 || senders[0] != senderB || senders[1] != senderA {
		t.Fatalf("unpaired senders = %v, want [%s %s]", senders, senderB, senderA)
	}

	// A release inside a transaction that fails leaves everything held.
	errBoom := errors.New("boom")
	err := s.Update(context.Background(), func(tx *Tx) error {
		got, err := tx.Release(senderA)
		if err != nil {
			return err
		}
		if len(got) != 2 {
			t.Errorf("release returned %d entries, want 2", len(got))
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("update err = %v, want boom", err)
	}
	if got := list(t, s, Filter{Cause: CauseUnpaired}); len(got) != 3 {
		t.Fatalf("after a rolled back release: %d unpaired entries, want 3", len(got))
	}

	// Release, reprocess, and put one back: it is held again with Releases = 1.
	var released []Entry
	if err := s.Update(context.Background(), func(tx *Tx) error {
		var err error
		released, err = tx.Release(senderA)
		if err != nil {
			return err
		}
		if len(released) != 2 || released[0].Seq != 10 || released[1].Seq != 20 {
			t.Errorf("released %+v, want seqs 10 and 20", released)
		}
		for _, e := range released {
			if len(e.Wire) == 0 || e.Releases != 1 {
				t.Errorf("released seq %d: wire %d bytes, releases %d; want the wire and 1", e.Seq, len(e.Wire), e.Releases)
			}
		}
		_, added, err := tx.Put(released[1]) // still refused
		if !added {
			t.Error("put back: added = false, want true")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waiting := func(sender string) []Entry {
		var w []Entry
		if err := s.View(context.Background(), func(tx *Tx) error {
			var err error
			w, err = tx.Waiting(sender)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := waiting(senderA); len(w) != 1 || w[0].Seq != 20 || w[0].Releases != 1 || !w[0].At.Equal(t0) {
		t.Fatalf("waiting for A = %+v, want seq 20 released once, first seen at t0", w)
	}
	if w := waiting(senderB); len(w) != 1 || w[0].Seq != 15 {
		t.Fatalf("waiting for B = %+v, want seq 15", w)
	}
	if got := list(t, s, Filter{}); len(got) != 3 {
		t.Fatalf("list has %d entries, want 3", len(got))
	}
}

func TestReleaseID(t *testing.T) {
	s := openTest(t)
	held, _ := put(t, s, entry(7, senderB, CauseMalformed))
	if err := s.Update(context.Background(), func(tx *Tx) error {
		e, err := tx.ReleaseID(held.ID)
		if err != nil {
			return err
		}
		if e.Seq != 7 || e.Releases != 1 || len(e.Wire) == 0 {
			t.Errorf("released %+v", e)
		}
		_, err = tx.ReleaseID(held.ID)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("second release err = %v, want ErrNotFound", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := list(t, s, Filter{}); len(got) != 0 {
		t.Fatalf("list has %d entries after release, want 0", len(got))
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	s := openTest(t)
	long := strings.Repeat("x", MaxRelayLen+1)
	tests := []struct {
		name string
		mod  func(*Entry)
	}{
		{"empty relay", func(e *Entry) { e.Relay = "" }},
		{"long relay", func(e *Entry) { e.Relay = long }},
		{"empty epoch", func(e *Entry) { e.Epoch = "" }},
		{"zero seq", func(e *Entry) { e.Seq = 0 }},
		{"negative seq", func(e *Entry) { e.Seq = -4 }},
		{"no cause", func(e *Entry) { e.Cause = 0 }},
		{"unknown cause", func(e *Entry) { e.Cause = 99 }},
		{"unpaired without sender", func(e *Entry) { e.Cause, e.Sender = CauseUnpaired, "" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := entry(1, senderA, CauseMalformed)
			tc.mod(&e)
			err := s.Update(context.Background(), func(tx *Tx) error { _, _, err := tx.Put(e); return err })
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if got := list(t, s, Filter{}); len(got) != 0 {
		t.Fatalf("list has %d entries, want 0", len(got))
	}
	// A long reason is cut, not refused: the receiver must not stall on its own words.
	e := entry(2, senderA, CauseRefused)
	e.Reason = strings.Repeat("é", MaxFieldLen)
	held, _ := put(t, s, e)
	if len(held.Reason) > MaxFieldLen || !strings.HasPrefix(e.Reason, held.Reason) {
		t.Fatalf("reason of %d bytes, want a prefix of at most %d", len(held.Reason), MaxFieldLen)
	}
}

func TestReadOnlyTx(t *testing.T) {
	s := openTest(t)
	err := s.View(context.Background(), func(tx *Tx) error {
		_, _, err := tx.Put(entry(1, senderA, CauseMalformed))
		return err
	})
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("put in a read-only tx: err = %v, want ErrReadOnly", err)
	}
	err = s.View(context.Background(), func(tx *Tx) error { _, err := tx.Release(senderA); return err })
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("release in a read-only tx: err = %v, want ErrReadOnly", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	s := openTest(t)
	db := s.DB()
	if err := db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRoot).Put(keySchema, binary.BigEndian.AppendUint64(nil, schemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db, nil); !errors.Is(err, ErrSchema) {
		t.Fatalf("open err = %v, want ErrSchema", err)
	}
}

func TestCauseText(t *testing.T) {
	for c := CauseMalformed; c <= CauseRefused; c++ {
		b, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Cause
		if err := back.UnmarshalText(b); err != nil || back != c {
			t.Fatalf("round trip of %s: got %v, %v", c, back, err)
		}
	}
	if _, err := ParseCause("nope"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ParseCause(nope) err = %v, want ErrInvalid", err)
	}
	if got := Cause(0).String(); got != "Cause(0)" {
		t.Fatalf("Cause(0).String() = %q", got)
	}
}
