package relayserver

import (
	"context"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// RejectRelayQuota is the rejection of an item the relay as a whole has no room for: its limit on
// the items or bytes all queues hold together is reached, or its disk is full. Retryable: the
// sender keeps the item and tries again later.
const RejectRelayQuota = "quota:relay"

// Relay-wide capacity defaults, for Serve to derive from the disk at start.
const (
	// DiskShare is the share of the store disk's free space at start that queued wire bytes may
	// take, counting each byte twice for the pages, indexes and WAL around it.
	DiskShare = 0.8
	// bytesPerItem is the least disk an item costs beyond its wire bytes (rows, indexes), which
	// turns the byte limit into the default item limit.
	bytesPerItem = 512
	// capacityRecheck is how often the totals are read again while the counts say the relay is
	// full and nothing was freed meanwhile (other replicas may have freed some).
	capacityRecheck = 30 * time.Second
)

// capacity keeps an upper bound of what all queues hold, and of the dedup rows (DedupRowBytes each
// on the byte limit: a tombstone takes disk as long as it lives), to hold the relay-wide limits
// without a query per push: pushes add to it before their unit commits (and give back what did
// not get stored), deletions are not subtracted, so it only over-counts. Only when it says full are the
// totals read again from the store, if something was freed since the last read (or a while has
// passed).
type capacity struct {
	store              Store
	maxItems, maxBytes int64 // <= 0: no limit

	mu           sync.Mutex
	items, bytes int64
	readAt       time.Time
	freed        bool
}

// take counts n items of b bytes if they fit, reading the totals again when the bound says they
// do not and it may be stale.
func (c *capacity) take(ctx context.Context, n, b int64, now time.Time) bool {
	if c.maxItems <= 0 && c.maxBytes <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fits(n, b) && (c.freed || now.Sub(c.readAt) >= capacityRecheck) {
		c.reload(ctx, now)
	}
	if !c.fits(n, b) {
		return false
	}
	c.items += n
	c.bytes += b
	return true
}

func (c *capacity) fits(n, b int64) bool {
	return (c.maxItems <= 0 || c.items+n <= c.maxItems) && (c.maxBytes <= 0 || c.bytes+b <= c.maxBytes)
}

// reload reads the totals from the store. Called with c.mu held.
func (c *capacity) reload(ctx context.Context, now time.Time) {
	t, err := heldTotals(ctx, c.store)
	if err != nil {
		return // keep the bound; a later push tries again
	}
	c.items, c.bytes, c.readAt, c.freed = t.Items, t.Bytes, now, false
}

// full reports whether the relay is at one of its limits, or within a small item of it (for the
// sweep, which then prunes dedup rows down to the honest retry horizon). The totals are read
// again first when the bound says so, since it over-counts.
func (c *capacity) full(ctx context.Context, now time.Time) bool {
	if c.maxItems <= 0 && c.maxBytes <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	const room = DedupRowBytes + 1024
	if c.fits(1, room) {
		return false
	}
	c.reload(ctx, now)
	return !c.fits(1, room)
}

// heldTotals is what the relay-wide limits count: the queues' items, and their wire bytes plus
// DedupRowBytes for every dedup row (tombstones included) when the store counts them.
func heldTotals(ctx context.Context, store Store) (Counts, error) {
	t, err := store.Totals(ctx)
	if err != nil {
		return t, err
	}
	if ur, ok := store.(UsageReporter); ok {
		n, err := ur.DedupRows(ctx)
		if err != nil {
			return t, err
		}
		t.Bytes += n * DedupRowBytes
	}
	return t, nil
}

// give returns what take counted for items that were not stored.
func (c *capacity) give(n, b int64) {
	c.mu.Lock()
	c.items -= n
	c.bytes -= b
	c.mu.Unlock()
}

// free notes that items were deleted (ack, sweep, rotation): the next push that finds the relay
// full reads the totals again.
func (c *capacity) free() {
	c.mu.Lock()
	c.freed = true
	c.mu.Unlock()
}

// spaceLow reports whether the store says its disk is full.
func (s *Server) spaceLow() bool {
	sr, ok := s.store.(SpaceReporter)
	return ok && sr.SpaceLow()
}

// takeCapacity counts the items of a push still in play against the relay-wide limits; an item
// that does not fit, or any item while the store's disk is full, gets noRoom: its targets that
// are not duplicates are refused with RejectRelayQuota inside its unit, after the dedup check,
// so a retry of an accepted item still learns its accept.
func (s *Server) takeCapacity(ctx context.Context, work []*pushWork, now time.Time) {
	low := s.spaceLow()
	for _, it := range work {
		if it.code != "" {
			continue
		}
		var c Counts
		for _, t := range it.targets {
			c.Items++
			c.Bytes += int64(len(t.wire)) + DedupRowBytes // the wire, and the dedup row that outlives it
		}
		if low || !s.cap.take(ctx, c.Items, c.Bytes, now) {
			it.noRoom = true
			continue
		}
		it.took = c
	}
}

// giveCapacity gives back what takeCapacity counted for items that were not stored: refused,
// duplicates, or the whole push failed (*errp).
func (s *Server) giveCapacity(work []*pushWork, errp *error) {
	for _, it := range work {
		if it.took != (Counts{}) && (*errp != nil || it.code != "" || it.dup) {
			s.cap.give(it.took.Items, it.took.Bytes)
			it.took = Counts{}
		}
	}
}

// diskCapacity returns the relay-wide limits Serve runs with: opt's when it sets any, else, for
// a store on a local disk (a SpaceReporter), what the queues hold now plus DiskShare of the
// disk's free space, counting each wire byte twice, and one item per bytesPerItem of that.
// A store elsewhere (PostgreSQL) gets no relay-wide limit by default.
func diskCapacity(ctx context.Context, store Store, dir string, opt Options) (items, bytes int64) {
	if opt.MaxRelayItems != 0 || opt.MaxRelayBytes != 0 {
		return opt.MaxRelayItems, opt.MaxRelayBytes
	}
	if _, local := store.(SpaceReporter); !local {
		return 0, 0
	}
	free, ok := fsutil.FreeSpace(dir)
	held, err := heldTotals(ctx, store)
	if !ok || err != nil {
		opt.Logger.Warn("relay-wide capacity: cannot read the free disk space, no limit", logkey.Dir, dir)
		return 0, 0
	}
	bytes = held.Bytes + int64(float64(free)*DiskShare/2)
	items = held.Items + int64(float64(free)*DiskShare/2)/bytesPerItem
	opt.Logger.Info("relay-wide capacity from the free disk space",
		logkey.Free, free, logkey.MaxItems, items, logkey.MaxBytes, bytes)
	return items, bytes
}
