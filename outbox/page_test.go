package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// fillOutbox adds n envelope rows (a millisecond apart, in chunks) and moves them through the
// states by their index: i%5 == 0 delivered (done), 1 rejected, 2 relay-accepted, else pending.
// It costs about a second of CPU for 3,000 rows.
func fillOutbox(t *testing.T, s *Store, clk interface{ Advance(time.Duration) }, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		clk.Advance(time.Millisecond)
		mustAdd(t, s, envRow(fmt.Sprintf("M%05d", i), fmt.Sprintf("peer%d", i%3)))
	}
	for i := 0; i < n; i++ {
		k := Key{ItemID: fmt.Sprintf("M%05d", i), Host: fmt.Sprintf("peer%d", i%3)}
		var err error
		switch i % 5 {
		case 0:
			_, err = s.MarkDelivered(ctx, k)
		case 1:
			_, err = s.MarkRejected(ctx, k, TransportLAN, "no such agent", false)
		case 2:
			_, err = s.MarkRelayAccepted(ctx, k, acceptance(t0, "e1", int64(i+1)))
		}
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
}

// wantPage is the page Page should return, computed from a full List.
func wantPage(t *testing.T, s *Store, states []State, limit int) ([]Key, int) {
	t.Helper()
	all, err := s.List(context.Background(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	all = slices.DeleteFunc(all, func(r Row) bool { return len(states) > 0 && !slices.Contains(states, r.State) })
	if len(all) <= limit {
		return keysOf(all), 0
	}
	return keysOf(all[len(all)-limit:]), len(all) - limit
}

func TestPageNewestOfStatesOldestFirst(t *testing.T) {
	s, clk := openTest(t)
	fillOutbox(t, s, clk, 3000)
	mustCheck(t, s)
	for _, tc := range []struct {
		name   string
		states []State
		limit  int
	}{
		{"active", []State{StatePending, StateRelayAccepted}, 50},
		{"every state", nil, 50},
		{"rejected", []State{StateRejected}, 7},
		{"done, more than there are", []State{StateDone}, 1000},
		{"one row", []State{StatePending}, 1},
		{"none in that state", []State{StateExpired}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.Page(context.Background(), tc.states, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			want, more := wantPage(t, s, tc.states, tc.limit)
			if got := keysOf(p.Rows); !slices.Equal(got, want) || p.More != more {
				t.Fatalf("Page(%v, %d) = %d rows (first %v), more %d; want %d rows (first %v), more %d",
					tc.states, tc.limit, len(got), first(got), p.More, len(want), first(want), more)
			}
			for _, r := range p.Rows {
				if r.Wire != nil {
					t.Fatalf("row %s carries wire bytes", r.Key())
				}
			}
		})
	}
}

func first(ks []Key) any {
	if len(ks) == 0 {
		return "none"
	}
	return ks[0]
}

func TestPageFollowsPrune(t *testing.T) {
	s, clk := openTest(t)
	fillOutbox(t, s, clk, 100)
	clk.Advance(time.Hour)
	if _, err := s.Prune(context.Background(), clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
	p, err := s.Page(context.Background(), nil, 500)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 60 || p.More != 0 { // 40 of 100 ended: 20 done, 20 rejected
		t.Fatalf("after prune: %d rows, more %d; want the 60 active ones", len(p.Rows), p.More)
	}
}

func TestPageBadInput(t *testing.T) {
	s, _ := openTest(t)
	if _, err := s.Page(context.Background(), nil, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("limit 0: %v, want ErrInvalid", err)
	}
	if _, err := s.Page(context.Background(), []State{State(9)}, 5); !errors.Is(err, ErrInvalid) {
		t.Errorf("state 9: %v, want ErrInvalid", err)
	}
}

// A store of schema 1 has no created index: Open builds it, and Check agrees with it.
func TestOpenBuildsCreatedIndex(t *testing.T) {
	db := openDB(t, false)
	clk := newClock()
	s, err := Open(db, &Options{Clock: clk.Now, Jitter: noJitter})
	if err != nil {
		t.Fatal(err)
	}
	fillOutbox(t, s, clk, 50)
	err = db.Update(func(tx *bbolt.Tx) error {
		top := tx.Bucket(bucketTop)
		if err := top.DeleteBucket(bucketCreated); err != nil {
			return err
		}
		return top.Bucket(bucketMeta).Put(metaSchema, binary.BigEndian.AppendUint64(nil, 1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(context.Background()); !errors.Is(err, ErrNoBuckets) {
		t.Fatalf("Check of a schema 1 store = %v, want ErrNoBuckets", err)
	}
	if s, err = Open(db, &Options{Clock: clk.Now}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
	p, err := s.Page(context.Background(), []State{StatePending}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if want, more := wantPage(t, s, []State{StatePending}, 5); !slices.Equal(keysOf(p.Rows), want) || p.More != more {
		t.Fatalf("Page after the upgrade: %v more %d, want %v more %d", keysOf(p.Rows), p.More, want, more)
	}
}

func TestCheckFindsStaleCreatedState(t *testing.T) {
	s, _ := openTest(t)
	r := mustAdd(t, s, envRow("M1", "peer"))[0]
	err := s.DB().Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketTop).Bucket(bucketCreated).Put(timeKey(r.CreatedAt, rowKey(r.Key())), []byte{byte(StateDone)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(context.Background()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check = %v, want ErrCorrupt", err)
	}
}

// BenchmarkPage100k: 100,000 rows, 90,000 of them done and 10,000 pending; one op is the page of
// the newest 50 pending rows (walks 100,000 created-index keys, decodes 50 rows), then the same
// page by the List the listing used before (decodes every row).
func BenchmarkPage100k(b *testing.B) {
	const total = 100_000
	clk := newClock()
	db := openDB(b, false)
	db.NoGrowSync = true
	s, err := Open(db, &Options{Clock: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	const chunk = 10_000
	for start := 0; start < total; start += chunk {
		err := db.Update(func(tx *bbolt.Tx) error {
			ob := s.In(tx)
			for i := start; i < start+chunk; i++ {
				clk.Advance(time.Millisecond)
				n := NewRow{Kind: KindEnvelope, ItemID: fmt.Sprintf("01J%023d", i), Host: "beta",
					HostKey: testKey(1), Wire: benchWire, Agent: "alice", Subject: "bench"}
				if _, err := ob.Add(n); err != nil {
					return err
				}
				if i%10 != 0 {
					if _, err := ob.MarkDelivered(n.Key()); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.Run("page", func(b *testing.B) {
		for b.Loop() {
			if p, err := s.Page(ctx, []State{StatePending, StateRelayAccepted}, 50); err != nil || len(p.Rows) != 50 || p.More != total/10-50 {
				b.Fatalf("page: %d rows, more %d, %v", len(p.Rows), p.More, err)
			}
		}
	})
	b.Run("list-all", func(b *testing.B) {
		for b.Loop() {
			if rows, err := s.List(ctx, Filter{}); err != nil || len(rows) != total {
				b.Fatalf("list: %d rows, %v", len(rows), err)
			}
		}
	})
}
