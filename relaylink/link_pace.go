package relaylink

import (
	"sync"

	"github.com/agentmbx/agentmbx/mbx"
)

// linkPace is the push pacer of the relay in use (pace.go): one per pinned relay, shared by every
// send of every outbox pass, so that the host's push requests stay under the relay's announced
// budget and rows due while a push is in flight go together in the next one.
type linkPace struct {
	mu  sync.Mutex
	url string // the relay the pacer is for (a new pin gets a new pacer)
	key string
	p   *Pacer
}

// pacer returns the pacer of c, sized from the limits lim the relay announced.
func (l *Link) pacer(c *Conn, lim mbx.Limits) *Pacer {
	l.pace.mu.Lock()
	defer l.pace.mu.Unlock()
	if l.pace.p == nil || l.pace.url != c.Pin.URL || l.pace.key != c.Pin.RelayKey {
		l.pace.url, l.pace.key = c.Pin.URL, c.Pin.RelayKey
		l.pace.p = NewPacer(lim, nil, nil)
	}
	l.pace.p.SetLimits(lim)
	return l.pace.p
}
