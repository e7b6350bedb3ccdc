package relayserver

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Defaults of long polling (GET /v2/relay/items?wait=).
const (
	// DefaultMaxWait caps the wait a pull may ask for; longer waits are cut to it.
	DefaultMaxWait = 30 * time.Second
	// DefaultMaxWaiting caps the pulls parked at once, over all keys, where the machine's memory
	// is unknown; else the cap is ParkedCapFor(MachineMemory()).
	DefaultMaxWaiting = 4096
	// DefaultMaxWaitingPerKey caps the pulls one host key may have parked at once.
	DefaultMaxWaitingPerKey = 2
)

// wakeReason says why a parked pull was woken.
type wakeReason int

const (
	// wakeNone: still parked.
	wakeNone wakeReason = iota
	// wakeItem: a transaction that queued something for the key committed.
	wakeItem
	// wakeEvicted: a newer pull of the same key took the slot.
	wakeEvicted
	// wakeShutdown: the server is shutting down.
	wakeShutdown
	// wakeTimeout: a held poll's wait is over (held.go).
	wakeTimeout
)

// String returns the reason's name for logs.
func (w wakeReason) String() string {
	switch w {
	case wakeNone:
		return "none"
	case wakeItem:
		return "item"
	case wakeEvicted:
		return "evicted"
	case wakeShutdown:
		return "shutdown"
	case wakeTimeout:
		return "timeout"
	default:
		return "wake(" + strconv.Itoa(int(w)) + ")"
	}
}

// waiter is one parked pull. ch is closed exactly once, when it is woken; why is set (under the
// table's lock) before that, so a receiver from ch may read it.
type waiter struct {
	key    string
	addrs  []string // the client address buckets it counts in (waiters.byAddr)
	ch     chan struct{}
	why    wakeReason
	parked bool // in the table; guarded by the table's lock
	// held is the poll's connection once its handler has handed it over (held.go); a wake then
	// answers it through the table's onHeld. Guarded by the table's lock.
	held *heldPoll
}

// waiters is the table of parked pulls, by target key. A pull registers before it reads the
// store, so a commit that lands after its read always finds it here: wake is called only after
// the transaction that holds the new item has committed, and every waiter of the key then reads
// again. The table is bounded: at most maxKey waiters per key (a newer pull evicts the oldest,
// which answers at once) and maxTotal in all (beyond that a pull is not parked and answers at
// once, as a pull without wait does).
type waiters struct {
	mu       sync.Mutex
	byKey    map[string][]*waiter
	total    int
	maxKey   int
	maxTotal int
	// byAddr counts the parked pulls per client address bucket (an IPv4 address; an IPv6 /64,
	// /56 and /48), each bounded by maxAddr (a /56 or /48 by maxAddr times its scale, at most
	// half of maxTotal).
	byAddr  map[string]int
	maxAddr int
	closed  bool
	// onHeld answers a held poll that was woken; it must not block (it runs under mu).
	onHeld func(*heldPoll, wakeReason)
}

func newWaiters(maxKey, maxTotal, maxAddr int) *waiters {
	return &waiters{byKey: map[string][]*waiter{}, byAddr: map[string]int{}, maxKey: maxKey, maxTotal: maxTotal, maxAddr: maxAddr}
}

// park registers a pull of key from the client address buckets addrs (clientKeys). It returns
// nil when the pull may not wait: the table is full, or the address has its share of it, or the
// table is closing (then with drainRetryAfter as the hint for the empty answer).
func (t *waiters) park(key string, addrs []rateKey) (*waiter, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, drainRetryAfter
	}
	if t.maxKey < 1 {
		return nil, 0
	}
	ws := t.byKey[key]
	evict := len(ws) >= t.maxKey
	if !evict && t.total >= t.maxTotal {
		return nil, 0
	}
	for _, a := range addrs {
		n, limit := t.byAddr[a.key], t.maxAddr
		if a.scale > 1 { // an IPv6 /56 or /48: more, but never half the table
			limit = min(limit*a.scale, max(t.maxTotal/2, t.maxAddr))
		}
		if evict && slices.Contains(ws[0].addrs, a.key) {
			n-- // the pull it evicts gives its place back
		}
		if n >= limit {
			return nil, 0
		}
	}
	if evict {
		// The oldest pull of this key (often one whose client already went away) gives way.
		t.wakeLocked(ws[0], wakeEvicted)
		ws = ws[1:]
	}
	w := &waiter{key: key, ch: make(chan struct{}), parked: true}
	if len(addrs) > 0 {
		w.addrs = make([]string, len(addrs))
		for i, a := range addrs {
			w.addrs[i] = a.key
			t.byAddr[a.key]++
		}
	}
	t.byKey[key] = append(ws, w)
	t.total++
	return w, 0
}

// unaddr takes w out of its address buckets (under mu).
func (t *waiters) unaddr(w *waiter) {
	for _, a := range w.addrs {
		if n := t.byAddr[a]; n <= 1 {
			delete(t.byAddr, a)
		} else {
			t.byAddr[a] = n - 1
		}
	}
}

// leave unregisters w if it is still parked. It is safe with a nil w and after a wake.
func (t *waiters) leave(w *waiter) { t.take(w) }

// take unregisters w if it is still parked and reports whether it was: whoever takes a parked
// waiter (a timeout, a client gone) answers its poll, else its wake does.
func (t *waiters) take(w *waiter) bool {
	if w == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !w.parked {
		return false
	}
	ws := t.byKey[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(t.byKey, w.key)
	} else {
		t.byKey[w.key] = ws
	}
	w.parked = false
	t.total--
	t.unaddr(w)
	return true
}

// hold hands w's poll over to h: a later wake answers it through onHeld. false when w was woken
// already (its wake reason is then in w.why, and the caller answers).
func (t *waiters) hold(w *waiter, h *heldPoll) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !w.parked {
		return false
	}
	w.held = h
	return true
}

// wake wakes every pull parked for key. Call it only after the commit that queued the item.
func (t *waiters) wake(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.byKey[key] {
		t.wakeLocked(w, wakeItem)
	}
	delete(t.byKey, key)
}

// wakeAll wakes every parked pull to read again (a shared store may have missed a notification).
func (t *waiters) wakeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, ws := range t.byKey {
		for _, w := range ws {
			t.wakeLocked(w, wakeItem)
		}
		delete(t.byKey, k)
	}
}

// close wakes every parked pull and refuses to park any more.
func (t *waiters) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for k, ws := range t.byKey {
		for _, w := range ws {
			t.wakeLocked(w, wakeShutdown)
		}
		delete(t.byKey, k)
	}
}

// len is the number of parked pulls.
func (t *waiters) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// wakeLocked wakes w; the caller removes it from byKey.
func (t *waiters) wakeLocked(w *waiter, why wakeReason) {
	w.why, w.parked = why, false
	close(w.ch)
	t.total--
	t.unaddr(w)
	if w.held != nil {
		t.onHeld(w.held, why)
	}
}

// parseWait reads the optional wait query parameter: whole seconds, 0 or absent for none, cut to
// max.
func parseWait(s string, max time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: wait must be a non-negative number of seconds", ErrBadRequest)
	}
	if max <= 0 {
		return 0, nil
	}
	if n > int64(max/time.Second) {
		return max, nil
	}
	return time.Duration(n) * time.Second, nil
}

// defaultWaitTimer is Options.WaitTimer's default.
func defaultWaitTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Parked is the number of long polls parked right now.
func (s *Server) Parked() int { return s.polls.len() }
