package mailstore

import "sync"

// notifier wakes everyone waiting for local mail. A waiter takes the current channel before it
// looks at the store, so a delivery that commits in between still wakes it.
type notifier struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed bool
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
