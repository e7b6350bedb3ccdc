package relaylink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Push pacing. A relay counts push requests per sender key (0.5.x: 120 a minute) and refuses
// the items of a request over that with rejected:rate. A host that pushed once per outbox pass
// and per peer went over it under a burst. The Pacer is the host's one way to push to a relay:
// every send hands it its rows, a single runner takes a token from a bucket
// (golang.org/x/time/rate) sized under the relay's announced budget, and pushes the rows queued
// by then, from every send, in one request up to max_batch and MaxPushBytes. While a push is in
// flight (or waits for its token), rows handed in queue for the next request: bursts become
// fewer, fuller requests instead of refusals.
//
// A request the relay refuses for the link (rejected:rate, 429, 503 with Retry-After) answers
// the rows still queued with the same refusal, without sending them: the caller pauses the link
// and postpones them without counting an attempt (the host's relay pause).

const (
	// paceShare is the part of the relay's per-minute budget the bucket refills: the rest is
	// margin for a clock that drifts, or for requests of a previous run still counted.
	paceShare = 0.9
	// paceBurstDiv: the bucket holds a tenth of the budget, so that in any minute the host
	// makes at most the budget (a tenth at once, nine tenths refilled).
	paceBurstDiv = 10
	// RatePause is the link pause after a 429 or a rate refusal that names no Retry-After.
	RatePause = 10 * time.Second
	// MaxPause caps a relay's Retry-After.
	MaxPause = 15 * time.Minute
)

// ErrNotSent marks the outcome of a row the Pacer did not push: its caller gave up (the
// context ended) before the row's turn. No attempt was made: the row stays as it was.
var ErrNotSent = errors.New("relay push not sent: its turn did not come in time")

// PaceFor returns the bucket of a relay's limits: the rate of paceShare of the announced
// pushes_per_minute (mbx.PushesPerMinute when not announced) and a burst of a tenth of it.
func PaceFor(l mbx.Limits) (rate.Limit, int) {
	ppm := l.PushesPerMinute
	if ppm <= 0 {
		ppm = mbx.PushesPerMinute
	}
	return rate.Limit(paceShare * float64(ppm) / 60), max(1, ppm/paceBurstDiv)
}

// PaceStats counts what a Pacer did.
type PaceStats struct {
	Requests int64 // push requests made
	Rows     int64 // rows pushed in them
	Refused  int64 // requests the relay refused for the link
}

// Pacer paces and coalesces the pushes to one relay. Make it with NewPacer; it is safe for
// concurrent use and runs a goroutine only while rows are queued.
type Pacer struct {
	clock func() time.Time
	sleep func(time.Duration)
	push  func(p *Pusher, ctx context.Context, rows []outbox.Row) []outbox.Outcome // (*Pusher).push; tests swap it

	mu      sync.Mutex
	lim     *rate.Limiter
	limits  mbx.Limits
	queue   []*pacedSend
	running bool

	requests, rows, refused atomic.Int64
}

// pacedSend is one caller's rows, answered when every row has an outcome.
type pacedSend struct {
	ctx    context.Context
	pusher *Pusher
	rows   []outbox.Row
	out    []outbox.Outcome
	queued []int // indexes of the rows not yet taken into a request, in order
	left   int   // rows without an outcome
	done   chan struct{}
}

// NewPacer returns a Pacer for a relay's limits. clock and sleep are time.Now and time.Sleep
// when nil (tests inject a fake clock whose sleep advances it).
func NewPacer(l mbx.Limits, clock func() time.Time, sleep func(time.Duration)) *Pacer {
	if clock == nil {
		clock = time.Now
	}
	if sleep == nil {
		sleep = time.Sleep
	}
	r, b := PaceFor(l)
	return &Pacer{clock: clock, sleep: sleep, push: (*Pusher).push, lim: rate.NewLimiter(r, b), limits: l}
}

// SetLimits resizes the bucket for limits the relay announced since.
func (pc *Pacer) SetLimits(l mbx.Limits) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if l == pc.limits {
		return
	}
	r, b := PaceFor(l)
	now := pc.clock()
	pc.lim.SetLimitAt(now, r)
	pc.lim.SetBurstAt(now, b)
	pc.limits = l
}

// Stats returns the counts so far.
func (pc *Pacer) Stats() PaceStats {
	return PaceStats{Requests: pc.requests.Load(), Rows: pc.rows.Load(), Refused: pc.refused.Load()}
}

// send queues rows for p's relay and returns their outcomes once pushed. When ctx ends first,
// the rows not yet answered get an ErrNotSent outcome (those in a request in flight may still
// have reached the relay: the row stays pending, and its next push is a duplicate).
func (pc *Pacer) send(ctx context.Context, p *Pusher, rows []outbox.Row) []outbox.Outcome {
	if len(rows) == 0 {
		return nil
	}
	s := &pacedSend{ctx: ctx, pusher: p, rows: rows, out: make([]outbox.Outcome, len(rows)), left: len(rows), done: make(chan struct{})}
	s.queued = make([]int, len(rows))
	for i := range s.queued {
		s.queued[i] = i
	}
	pc.mu.Lock()
	pc.queue = append(pc.queue, s)
	if !pc.running {
		pc.running = true
		go pc.run()
	}
	pc.mu.Unlock()
	select {
	case <-s.done:
		return s.out
	case <-ctx.Done():
		return notSent(len(rows), ctx.Err())
	}
}

func notSent(n int, cause error) []outbox.Outcome {
	return outbox.FailedAll(n, fmt.Errorf("%w: %w", ErrNotSent, cause), false)
}

// run pushes the queued rows, a request per token, until the queue is empty.
func (pc *Pacer) run() {
	for {
		pc.mu.Lock()
		pc.dropEnded()
		if len(pc.queue) == 0 {
			pc.running = false
			pc.mu.Unlock()
			return
		}
		lim := pc.lim
		pc.mu.Unlock()
		now := pc.clock()
		if d := lim.ReserveN(now, 1).DelayFrom(now); d > 0 {
			pc.sleep(d) // at most one token's refill: the runner takes one token at a time
		}
		pc.mu.Lock()
		pc.dropEnded()
		parts, rows := pc.take()
		pc.mu.Unlock()
		if len(rows) == 0 {
			continue
		}
		ctx, cancel := batchContext(parts)
		out := pc.push(parts[0].s.pusher, ctx, rows)
		cancel()
		pc.requests.Add(1)
		pc.rows.Add(int64(len(rows)))
		pc.answer(parts, out)
	}
}

// part is the rows of one send in one request (indexes into its rows).
type part struct {
	s   *pacedSend
	idx []int
}

// take moves rows from the head of the queue into one request: up to max_batch rows and
// MaxPushBytes of wire (one row at least), in queue order. A row whose item id is in the request
// already (the same message for another host) waits for the next one: a request names an item
// once, and each row keeps its own result. Called with pc.mu held.
func (pc *Pacer) take() ([]part, []outbox.Row) {
	maxBatch := max(1, min(pc.limits.MaxBatch, mbx.DefaultMaxBatch))
	var parts []part
	var rows []outbox.Row
	ids := map[string]bool{}
	size := 0
	full := false
	for _, s := range pc.queue {
		var p part
		left := s.queued[:0:0]
		for _, j := range s.queued {
			r := s.rows[j]
			switch {
			case full || ids[r.ItemID]:
				left = append(left, j)
				continue
			case len(rows) >= maxBatch || (len(rows) > 0 && size+len(r.Wire) > MaxPushBytes):
				full = true
				left = append(left, j)
				continue
			}
			ids[r.ItemID] = true
			size += len(r.Wire)
			rows = append(rows, r)
			p.idx = append(p.idx, j)
		}
		s.queued = left
		if len(p.idx) > 0 {
			p.s = s
			parts = append(parts, p)
		}
		if full {
			break
		}
	}
	pc.queue = slices.DeleteFunc(pc.queue, func(s *pacedSend) bool { return len(s.queued) == 0 })
	return parts, rows
}

// answer hands a request's outcomes to its sends. A refusal for the link answers every row
// still queued with it too: they would only be refused again.
func (pc *Pacer) answer(parts []part, out []outbox.Outcome) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var refusal *outbox.Outcome
	i := 0
	for _, p := range parts {
		for _, j := range p.idx {
			p.s.out[j] = out[i]
			if _, ok := LinkRefusal(out[i]); ok && refusal == nil {
				refusal = &out[i]
			}
			i++
		}
		p.s.finish(len(p.idx))
	}
	if refusal == nil {
		return
	}
	pc.refused.Add(1)
	for _, s := range pc.queue {
		for _, j := range s.queued {
			s.out[j] = *refusal
		}
		s.finish(len(s.queued))
		s.queued = nil
	}
	pc.queue = nil
}

// finish counts n rows answered and wakes the caller when none is left.
func (s *pacedSend) finish(n int) {
	s.left -= n
	if s.left == 0 && n > 0 {
		close(s.done)
	}
}

// dropEnded takes the sends whose caller gave up out of the queue. Called with pc.mu held.
func (pc *Pacer) dropEnded() {
	keep := pc.queue[:0]
	for _, s := range pc.queue {
		if s.ctx.Err() == nil {
			keep = append(keep, s)
			continue
		}
		for _, j := range s.queued {
			s.out[j] = notSent(1, s.ctx.Err())[0]
		}
		s.finish(len(s.queued))
		s.queued = nil
	}
	clear(pc.queue[len(keep):])
	pc.queue = keep
}

// batchContext is the context of one request: it ends when every send in it gave up, so a
// request serving a caller that still waits is not cut short by another that left.
func batchContext(parts []part) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parts[0].s.ctx))
	var left atomic.Int64
	left.Store(int64(len(parts)))
	stops := make([]func() bool, len(parts))
	for i, p := range parts {
		stops[i] = context.AfterFunc(p.s.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// codeRate is the relay's rejection code for a sender over its rate (spec §8).
const codeRate = "rate"

// LinkRefusal reports whether o is the relay refusing for the link, not the row (rejected:rate,
// a 429, a 503 with Retry-After), and the pause it asks for.
func LinkRefusal(o outbox.Outcome) (time.Duration, bool) {
	switch o.Kind {
	case outbox.OutcomeRejected:
		if rf := (*Refusal)(nil); errors.As(o.Err, &rf) && rf.Code == codeRate {
			return RatePause, true
		}
	case outbox.OutcomeFailed:
		var se *relayclient.StatusError
		if errors.As(o.Err, &se) && (se.Status == http.StatusTooManyRequests ||
			(se.Status == http.StatusServiceUnavailable && se.RetryAfter > 0)) {
			if se.RetryAfter > 0 {
				return min(se.RetryAfter, MaxPause), true
			}
			return RatePause, true
		}
	}
	return 0, false
}
