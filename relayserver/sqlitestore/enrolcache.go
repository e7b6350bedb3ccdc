package sqlitestore

import (
	"strings"
	"sync"

	"github.com/agentmbx/agentmbx/relayserver"
)

// maxCachedEnrolments bounds the enrolment cache; a full cache starts over.
const maxCachedEnrolments = 1 << 16

// enrolCache keeps the enrolments that Store.Enrolment read, so a signed request's caller is not
// looked up in the database each time. It is sound because this process is the store's only
// writer (the lock file) and the writer empties the cache after every transaction that wrote the
// enrolments table, before any caller of that transaction is told its outcome: a request that
// starts after an enrolment, revocation or rotation returned sees it.
//
// A lookup that raced such a transaction must not put back what it read before the commit: gen
// counts the invalidations, and put keeps an entry only when no invalidation happened since the
// lookup's get.
type enrolCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]relayserver.Enrolment
}

func newEnrolCache() *enrolCache { return &enrolCache{m: map[string]relayserver.Enrolment{}} }

// get returns the cached enrolment of pub, and the generation a put of a fresh read must name.
func (c *enrolCache) get(pub string) (relayserver.Enrolment, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[pub]
	return e, c.gen, ok
}

// put keeps e, read after get returned gen, unless the cache was emptied since.
func (c *enrolCache) put(pub string, e relayserver.Enrolment, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if len(c.m) >= maxCachedEnrolments {
		clear(c.m)
	}
	c.m[pub] = e
}

// invalidate empties the cache.
func (c *enrolCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.m)
}

// writesEnrolments reports whether a write statement's text names the enrolments table.
func writesEnrolments(query string) bool {
	return strings.Contains(strings.ToLower(query), "enrolments")
}
