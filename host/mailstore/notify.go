package mailstore

import (
	"context"
	"sync"
	"time"
)

// notifier wakes everyone waiting for local mail. A waiter takes the current channel before it
// looks at the store, so a delivery that commits in between still wakes it.
type notifier struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed bool
	parked int // waiters in park now
}

// park blocks until ch closes (woken), timeout fires or ctx ends (its error), counted in the
// parked waiters meanwhile.
func (n *notifier) park(ctx context.Context, timeout <-chan time.Time, ch <-chan struct{}) (woken bool, err error) {
	n.mu.Lock()
	n.parked++
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.parked--
		n.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-timeout:
		return false, nil
	case <-ch:
		return true, nil
	}
}

// waiters is how many waiters are parked now.
func (n *notifier) waiters() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parked
}

func (n *notifier) init() { n.ch = make(chan struct{}) }

// wait returns a channel that is closed at the next notify (or close), and whether the store is
// closed already.
func (n *notifier) wait() (<-chan struct{}, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch, n.closed
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	close(n.ch)
	n.ch = make(chan struct{})
}

func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		close(n.ch)
	}
}
