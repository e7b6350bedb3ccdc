package storekit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// Failpoints of the writers (see package failpoint); both stores fire them.
const (
	// FailBeforeCommit fires after every unit of a group ran, before COMMIT.
	FailBeforeCommit = "relay.before-commit"
	// FailAfterCommit fires right after COMMIT returned, before any caller is told.
	FailAfterCommit = "relay.after-commit"
)

// Request is one caller's unit waiting for a writer.
type Request struct {
	Ctx context.Context
	Fn  func(relayserver.Tx) error
	// Err is the unit's own outcome, read by the caller once the request is answered.
	Err error
	// Tries counts the times a writer ran the unit and deferred it (pgstore's lock conflicts).
	Tries int
	done  chan struct{}
}

// Answer tells the waiting caller that Err is final. Call it once.
func (r *Request) Answer() { close(r.done) }

// Queue hands units from callers to a store's writers and answers them at shutdown.
type Queue struct {
	reqs     chan *Request
	quit     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

// NewQueue returns a queue that holds up to size units before Submit waits.
func NewQueue(size int) *Queue {
	return &Queue{reqs: make(chan *Request, size), quit: make(chan struct{}), stopped: make(chan struct{})}
}

// Submit queues fn and waits for its answer. After Stop it fails with relayserver.ErrClosed.
// When ctx ends first the unit may still commit: the caller only stops waiting, its client
// retries, and dedup turns the retry into a duplicate.
func (q *Queue) Submit(ctx context.Context, fn func(relayserver.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-q.quit:
		return relayserver.ErrClosed
	default:
	}
	r := &Request{Ctx: ctx, Fn: fn, done: make(chan struct{})}
	select {
	case q.reqs <- r:
	case <-q.quit:
		return relayserver.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return r.Err
	case <-q.stopped:
		select {
		case <-r.done:
			return r.Err
		default:
			return relayserver.ErrClosed
		}
	case <-ctx.Done():
		return fmt.Errorf("waiting for commit: %w", ctx.Err())
	}
}

// Wait returns the next queued unit, or nil once Stop was called.
func (q *Queue) Wait() *Request {
	select {
	case r := <-q.reqs:
		return r
	case <-q.quit:
		return nil
	}
}

// Next returns a unit already queued, or nil when none is.
func (q *Queue) Next() *Request {
	select {
	case r := <-q.reqs:
		return r
	default:
		return nil
	}
}

// Stop tells the writers to finish (Wait returns nil) and waits until Stopped was called.
func (q *Queue) Stop() {
	q.stopOnce.Do(func() { close(q.quit) })
	<-q.stopped
}

// Stopped is called once when the writers have returned: it fails every unit still queued with
// relayserver.ErrClosed and releases Stop.
func (q *Queue) Stopped() {
	for r := q.Next(); r != nil; r = q.Next() {
		r.Err = relayserver.ErrClosed
		r.Answer()
	}
	close(q.stopped)
}

// Fail answers every unit of a group whose transaction did not commit with err.
func Fail(batch []*Request, err error) {
	for _, r := range batch {
		r.Err = err
		r.Answer()
	}
}

// Len is the number of units queued and not yet taken by a writer.
func (q *Queue) Len() int { return len(q.reqs) }

// Counters counts a writer's commits and tells the function set by Report about each.
type Counters struct {
	Commits, Units atomic.Int64 // committed transactions and the units they carried
	report         atomic.Pointer[func(units int, took time.Duration)]
}

// Report sets the function told each commit's units and the time from the group's start to the
// end of its COMMIT (nil: none).
func (c *Counters) Report(fn func(units int, took time.Duration)) {
	if fn == nil {
		c.report.Store(nil)
		return
	}
	c.report.Store(&fn)
}

// Committed counts a group that committed, reports it, and answers its units.
func (c *Counters) Committed(batch []*Request, start time.Time) {
	c.Commits.Add(1)
	c.Units.Add(int64(len(batch)))
	if f := c.report.Load(); f != nil {
		(*f)(len(batch), time.Since(start))
	}
	for _, r := range batch {
		r.Answer()
	}
}
