package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

// wakes collects what a subscription passes on.
type wakes chan string

func (w wakes) fn(target string) {
	select {
	case w <- target:
	default:
	}
}

// waitWake waits for target (skipping re-check wakes "") and fails after a generous timeout.
func (w wakes) waitWake(t *testing.T, target string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case got := <-w:
			if got == target {
				return
			}
		case <-deadline:
			t.Fatalf("no wake for %s", target)
		}
	}
}

func TestCommitOnOneReplicaWakesAnother(t *testing.T) {
	a, url := openT(t, nil)
	b, err := Open(ctx, url, &Options{Recheck: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := make(wakes, 64)
	cancel := b.Subscribe(w.fn)
	defer cancel()
	w.waitWake(t, "") // listening
	tgt := storetest.Key(1)
	storetest.Insert(t, a, storetest.NewItem(tgt, storetest.Key(2), "x", "w", 1))
	w.waitWake(t, tgt)

	// A unit that rolls back announces nothing; its neighbour in the same transaction does.
	err = a.Update(ctx, func(tx relayserver.Tx) error {
		_ = tx.Unit(func(tx relayserver.Tx) error {
			if _, err := tx.InsertItem(storetest.NewItem(storetest.Key(3), storetest.Key(2), "x", "w", 1)); err != nil {
				return err
			}
			return errors.New("boom")
		})
		_, err := tx.InsertItem(storetest.NewItem(storetest.Key(4), storetest.Key(2), "x", "w", 1))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	w.waitWake(t, storetest.Key(4))
	select {
	case got := <-w:
		if got == storetest.Key(3) {
			t.Fatalf("a rolled-back unit's target was announced")
		}
	case <-time.After(200 * time.Millisecond):
	}
}

// TestLostListenerRechecksEveryPull: when the listening connection dies, notifications sent
// meanwhile are lost, so the reconnected listener asks for a re-check of every parked pull.
func TestLostListenerRechecksEveryPull(t *testing.T) {
	s, _ := openT(t, &Options{Recheck: time.Hour})
	w := make(wakes, 64)
	cancel := s.Subscribe(w.fn)
	defer cancel()
	w.waitWake(t, "")
	tag, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE '%pg_advisory_lock_shared%' AND pid <> pg_backend_pid()`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("terminating the listener: %v, %d rows", err, tag.RowsAffected())
	}
	w.waitWake(t, "")
	storetest.Insert(t, s, storetest.NewItem(storetest.Key(1), storetest.Key(2), "x", "w", 1))
	w.waitWake(t, storetest.Key(1))
}

func TestPeriodicRecheck(t *testing.T) {
	s, _ := openT(t, &Options{Recheck: 50 * time.Millisecond})
	w := make(wakes, 64)
	cancel := s.Subscribe(w.fn)
	defer cancel()
	for range 3 {
		w.waitWake(t, "")
	}
}

func TestRotateEpochRefusedWhileServing(t *testing.T) {
	s, url := openT(t, nil)
	replica, err := Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := make(wakes, 64)
	replica.Subscribe(w.fn)
	w.waitWake(t, "") // holds the serving lock now
	before, _ := s.Meta(ctx)
	if _, err := s.RotateEpoch(ctx); !errors.Is(err, relayserver.ErrLocked) {
		t.Fatalf("RotateEpoch while a replica serves = %v, want ErrLocked", err)
	}
	if m, _ := s.Meta(ctx); m.Epoch != before.Epoch {
		t.Fatalf("a refused rotation changed the epoch")
	}
	replica.Close()
	// The server drops the closed session's lock a moment later.
	var e string
	deadline := time.Now().Add(30 * time.Second)
	for e, err = s.RotateEpoch(ctx); errors.Is(err, relayserver.ErrLocked) && time.Now().Before(deadline); e, err = s.RotateEpoch(ctx) {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || e == before.Epoch {
		t.Fatalf("RotateEpoch after the replica stopped = %q, %v", e, err)
	}
}

func TestRotateEpochIfStaleRotatesOnce(t *testing.T) {
	s, url := openT(t, nil)
	now := time.UnixMilli(1_800_000_000_000)
	if err := s.Heartbeat(ctx, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Meta(ctx)
	epochs := make(chan string, 3)
	rotations := make(chan bool, 3)
	for range 3 {
		go func() {
			r, err := Open(ctx, url, nil)
			if err != nil {
				t.Error(err)
				epochs <- ""
				rotations <- false
				return
			}
			defer r.Close()
			e, rotated, err := r.RotateEpochIfStale(ctx, now, 10*time.Minute)
			if err != nil {
				t.Error(err)
			}
			epochs <- e
			rotations <- rotated
		}()
	}
	var first string
	n := 0
	for range 3 {
		e := <-epochs
		if first == "" {
			first = e
		}
		if e != first || e == before.Epoch {
			t.Fatalf("replicas see epochs %q and %q (before %q), want one new epoch", first, e, before.Epoch)
		}
		if <-rotations {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d replicas rotated, want 1", n)
	}
	if m, _ := s.Meta(ctx); !m.Heartbeat.Equal(now) {
		t.Fatalf("heartbeat = %v, want %v", m.Heartbeat, now)
	}
}
