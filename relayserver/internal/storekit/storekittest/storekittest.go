// Package storekittest checks what the SQL stores' writers share: a group commit carries the
// units queued while it runs, and a commit that fails fails every unit in it. Each store's tests
// call it with hooks into their writer.
package storekittest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

// Writer is a store with one writer, and that writer's test hooks.
type Writer struct {
	Store relayserver.Store
	// Queued is the number of units waiting for the writer.
	Queued func() int
	// BeforeCommit installs the hook the writer runs before COMMIT with the group's size; an error
	// fails the commit.
	BeforeCommit func(func(n int) error)
}

var ctx = context.Background()

// Hold makes the writer run a unit that blocks until release is closed, and returns once that
// unit is running, so a test can queue more units behind it deterministically. The unit inserts
// an item for Key(9) from Key(8).
func (w Writer) Hold(t *testing.T, release chan struct{}) chan error {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	res := make(chan error, 1)
	go func() {
		res <- w.Store.Update(ctx, func(tx relayserver.Tx) error {
			once.Do(func() { close(started) }) // a unit may run again (Store.Update)
			<-release
			_, err := tx.InsertItem(storetest.NewItem(storetest.Key(9), storetest.Key(8), "first", "f", 1))
			return err
		})
	}()
	<-started
	return res
}

// WaitQueued waits until n units wait for the writer.
func (w Writer) WaitQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d units queued, want %d", w.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// RunQueued queues n units behind the unit Hold holds (unit i inserts an item for Key(9) from
// Key(i)), releases it once all are queued, and returns each unit's error.
func (w Writer) RunQueued(t *testing.T, release chan struct{}, n int) []error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.Store.Update(ctx, func(tx relayserver.Tx) error {
				_, err := tx.InsertItem(storetest.NewItem(storetest.Key(9), storetest.Key(i), "x", "w", 1))
				return err
			})
		}()
	}
	w.WaitQueued(t, n)
	close(release)
	wg.Wait()
	return errs
}

// GroupCommit checks that ten units queued behind a running one commit with it, in one commit.
// It returns how many units that commit carried.
func GroupCommit(t *testing.T, w Writer) int {
	t.Helper()
	var sizes []int
	w.BeforeCommit(func(n int) error { sizes = append(sizes, n); return nil })
	release := make(chan struct{})
	first := w.Hold(t, release)
	const n = 10
	errs := w.RunQueued(t, release, n)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
	}
	if len(sizes) != 1 || sizes[0] != n+1 {
		t.Fatalf("commit group sizes = %v, want one commit of %d units", sizes, n+1)
	}
	return n + 1
}

// FailedCommit checks that a commit that fails fails every unit in it with relayserver.ErrCommit,
// stores nothing of them, and that the next unit commits.
func FailedCommit(t *testing.T, w Writer) {
	t.Helper()
	failNext := true
	w.BeforeCommit(func(int) error {
		if failNext {
			failNext = false
			return errors.New("disk full")
		}
		return nil
	})
	release := make(chan struct{})
	first := w.Hold(t, release)
	errs := w.RunQueued(t, release, 5)
	if err := <-first; !errors.Is(err, relayserver.ErrCommit) {
		t.Fatalf("first unit = %v, want ErrCommit", err)
	}
	for i, err := range errs {
		if !errors.Is(err, relayserver.ErrCommit) {
			t.Fatalf("unit %d = %v, want ErrCommit", i, err)
		}
	}
	p, _ := w.Store.Pull(ctx, storetest.Key(9), 0, 100, 1<<20)
	if len(p.Items) != 0 || p.HeadSeq != 0 {
		t.Fatalf("after failed commit the queue holds %+v, want nothing", p)
	}
	// The writer recovers: the next unit commits.
	storetest.Insert(t, w.Store, storetest.NewItem(storetest.Key(9), storetest.Key(1), "after", "a", 1))
}
