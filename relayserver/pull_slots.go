package relayserver

import (
	"sync"
	"time"
)

// Defaults of the bounds on pull answers being written (docs/design.md: Pull answers).
const (
	// DefaultResponseBudget is the relay-wide budget of pull answer bytes held in memory at once.
	DefaultResponseBudget = 64 << 20
	// DefaultMaxPullsPerKey is how many answers one host key may have being written at once: a
	// newer pull ends the oldest (a host whose connection died pulls again; its old answer has no
	// reader).
	DefaultMaxPullsPerKey = 2
	// DefaultMaxPullsPerClient is how many answers with items one client address may have being
	// written at once; past it a pull gets 503 with Retry-After.
	DefaultMaxPullsPerClient = 16
	// DefaultPullChunk is how many wire bytes of a pull answer are read from the store and held at
	// once (at least the largest item, Limits.MaxItemBytes).
	DefaultPullChunk = 512 << 10
	// DefaultPullWriteGrace and DefaultPullMinRate set the write deadline of each chunk of a pull
	// answer: the grace plus the chunk's bytes at the rate. A reader slower than that loses the
	// connection (its host pulls again).
	DefaultPullWriteGrace = 10 * time.Second
	DefaultPullMinRate    = 32 << 10 // bytes per second
)

// pullSlots bounds the pull answers being written at once, per host key (a newer answer ends the
// oldest) and per client address (past it a pull is refused). It holds only keys and addresses
// with answers in flight, so it is bounded by the open connections.
type pullSlots struct {
	mu      sync.Mutex
	maxKey  int
	maxAddr int
	byKey   map[string][]*pullSlot
	byAddr  map[string]int
	ended   int64 // answers ended by a newer pull of their key, ever
}

// pullSlot is one answer being written. end, called at most once and only while the slot is
// held, makes its handler stop: it is how a newer pull of the key ends it.
type pullSlot struct {
	key, addr string
	end       func()
	ended     bool
}

func newPullSlots(maxKey, maxAddr int) *pullSlots {
	return &pullSlots{maxKey: maxKey, maxAddr: maxAddr, byKey: map[string][]*pullSlot{}, byAddr: map[string]int{}}
}

// acquire takes a slot for an answer to key's pull from addr, ending key's oldest answer when
// key is at its cap. ok is false, and nothing is taken, when addr is at its cap.
func (p *pullSlots) acquire(key, addr string, end func()) (*pullSlot, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byAddr[addr] >= p.maxAddr {
		return nil, false
	}
	ss := p.byKey[key]
	for len(ss) >= p.maxKey {
		old := ss[0]
		ss = ss[1:]
		old.ended = true
		old.end() // its handler still holds its address's count until it returns
		p.ended++
	}
	sl := &pullSlot{key: key, addr: addr, end: end}
	p.byKey[key] = append(ss, sl)
	p.byAddr[addr]++
	return sl, true
}

// release gives sl back; call it before the handler returns.
func (p *pullSlots) release(sl *pullSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.byAddr[sl.addr]; n <= 1 {
		delete(p.byAddr, sl.addr)
	} else {
		p.byAddr[sl.addr] = n - 1
	}
	if sl.ended {
		return
	}
	ss := p.byKey[sl.key]
	for i, x := range ss {
		if x == sl {
			ss = append(ss[:i:i], ss[i+1:]...)
			break
		}
	}
	if len(ss) == 0 {
		delete(p.byKey, sl.key)
	} else {
		p.byKey[sl.key] = ss
	}
}

// endedCount is the number of answers ended by a newer pull of their key.
func (p *pullSlots) endedCount() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

// len is the number of answers being written.
func (p *pullSlots) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.byAddr {
		n += c
	}
	return n
}
