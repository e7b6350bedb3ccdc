package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// notifyChannel is the LISTEN/NOTIFY channel that carries the target keys of committed items.
const notifyChannel = "agentmbx_items"

// maxRetries bounds how often a unit is re-run after a deadlock or a lock timeout.
const maxRetries = 8

// groupTimeout bounds one group transaction, so a connection that hangs fails its units instead
// of holding them forever.
const groupTimeout = 2 * time.Minute

// writer runs Options.Writers goroutines. Each takes the first waiting unit, opens a transaction
// on a pooled connection, runs that unit and every unit already queued (up to maxGroup) each in a
// savepoint of its own, and commits once. Only the first unit of a group waits for a queue lock:
// a later one that finds its lock held by another transaction is rolled back to its savepoint and
// leads the writer's next group instead, so a group never waits while it holds locks and groups
// of several writers or replicas cannot deadlock on queue locks.
type writer struct {
	pool     *pgxpool.Pool
	maxGroup int
	queue    *storekit.Queue
	wg       sync.WaitGroup

	// beforeCommit, when set (tests), runs before COMMIT with the group size; an error fails the
	// commit.
	beforeCommit func(n int) error

	storekit.Counters
	retries atomic.Int64
}

func newWriter(pool *pgxpool.Pool, o Options) *writer {
	w := &writer{pool: pool, maxGroup: o.MaxGroup, queue: storekit.NewQueue(4096)}
	for range o.Writers {
		w.wg.Add(1)
		go w.run()
	}
	go func() { w.wg.Wait(); w.queue.Stopped() }()
	return w
}

func (w *writer) submit(ctx context.Context, fn func(relayserver.Tx) error) error {
	return w.queue.Submit(ctx, fn)
}

func (w *writer) stop() { w.queue.Stop() }

func (w *writer) run() {
	defer w.wg.Done()
	// pending holds this writer's units that could not take a queue lock in a group and wait
	// for the next one, which starts with them: the first unit of a group may wait for a lock.
	var pending []*storekit.Request
	for {
		var first *storekit.Request
		if len(pending) > 0 {
			first, pending = pending[0], pending[1:]
		} else if first = w.queue.Wait(); first == nil {
			return
		}
		pending = w.group(first, pending)
	}
}

// group runs one transaction: first (which may wait for its locks), then this writer's pending
// units and whatever else is queued (which may not: one that meets a lock held by another
// transaction is rolled back and deferred). It returns the units deferred to the next group.
func (w *writer) group(first *storekit.Request, pending []*storekit.Request) (deferred []*storekit.Request) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		storekit.Fail(append([]*storekit.Request{first}, pending...), fmt.Errorf("connect: %v: %w", err, relayserver.ErrCommit))
		return nil
	}
	defer conn.Release()
	pt, err := conn.Begin(ctx)
	if err != nil {
		storekit.Fail(append([]*storekit.Request{first}, pending...), fmt.Errorf("begin: %v: %w", err, relayserver.ErrCommit))
		return nil
	}
	t := &tx{ctx: ctx, q: pt, wait: true, held: map[string]int{}}
	var batch []*storekit.Request
	runOne := func(r *storekit.Request) {
		switch w.runUnit(t, r) {
		case outcomeDone:
			batch = append(batch, r)
		case outcomeDefer:
			deferred = append(deferred, r)
		}
	}
	runOne(first)
	t.wait = false
	for t.broken == nil && len(batch)+len(deferred) < w.maxGroup {
		var r *storekit.Request
		if len(pending) > 0 {
			r, pending = pending[0], pending[1:]
		} else {
			r = w.queue.Next()
		}
		if r == nil {
			break
		}
		runOne(r)
	}
	deferred = append(deferred, pending...)
	if t.broken != nil {
		_ = pt.Rollback(context.Background())
		storekit.Fail(batch, fmt.Errorf("%v: %w", t.broken, relayserver.ErrCommit))
		return deferred
	}
	if len(batch) == 0 {
		_ = pt.Rollback(context.Background())
		return deferred
	}
	if err := w.commit(ctx, pt, t, len(batch)); err != nil {
		storekit.Fail(batch, err)
		return deferred
	}
	w.Committed(batch, start)
	return deferred
}

// commit notifies the targets of the group's items (delivered only if the transaction commits)
// and commits. A commit whose outcome the connection did not report is looked up by the
// transaction id on another connection, so a committed group is never reported as failed.
func (w *writer) commit(ctx context.Context, pt pgx.Tx, t *tx, n int) error {
	if len(t.notify) > 0 {
		if _, err := pt.Exec(ctx, "SELECT pg_notify($1, k) FROM unnest($2::text[]) AS k",
			notifyChannel, dedupe(t.notify)); err != nil {
			_ = pt.Rollback(context.Background())
			return fmt.Errorf("notify: %v: %w", err, relayserver.ErrCommit)
		}
	}
	err := failpoint.Inject(storekit.FailBeforeCommit)
	if err == nil && w.beforeCommit != nil {
		err = w.beforeCommit(n)
	}
	if err != nil {
		_ = pt.Rollback(context.Background())
		return fmt.Errorf("commit: %v: %w", err, relayserver.ErrCommit)
	}
	var xid int64
	if err := pt.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		_ = pt.Rollback(context.Background())
		return fmt.Errorf("commit: %v: %w", err, relayserver.ErrCommit)
	}
	if err := pt.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) {
			return fmt.Errorf("commit: %v: %w", err, relayserver.ErrCommit) // the server said no
		}
		committed, rerr := w.resolve(xid)
		if rerr != nil {
			return fmt.Errorf("commit: %v; outcome unknown: %v: %w", err, rerr, ErrCommitUnknown)
		}
		if !committed {
			return fmt.Errorf("commit: %v: %w", err, relayserver.ErrCommit)
		}
	}
	_ = failpoint.Inject(storekit.FailAfterCommit)
	return nil
}

// ErrCommitUnknown is wrapped (with relayserver.ErrCommit) by the error of a group whose COMMIT
// lost its connection and whose outcome could not be looked up: the units may or may not be
// stored. Callers answer as for a failed commit; a client's retry is then a duplicate or a new
// item, never a second copy.
var ErrCommitUnknown = fmt.Errorf("commit outcome unknown: %w", relayserver.ErrCommit)

// resolve asks the server, on another connection, whether transaction xid committed. It waits
// while the transaction is still in progress (its backend may not have noticed the lost client).
func (w *writer) resolve(xid int64) (bool, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var status *string
		err := w.pool.QueryRow(ctx, "SELECT txid_status($1)", xid).Scan(&status)
		cancel()
		switch {
		case err == nil && status != nil && *status == "committed":
			return true, nil
		case err == nil && status != nil && *status == "aborted":
			return false, nil
		case err == nil && status == nil:
			return false, fmt.Errorf("transaction %d is too old to look up", xid)
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("still in progress")
			}
			return false, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A unit's outcome in a group.
type outcome int

const (
	outcomeDone  outcome = iota // ran (its own error, if any, is in r.Err): answered with the group
	outcomeDefer                // lost a lock: rolled back, runs again in a later group
	outcomeGone                 // answered already (gave up)
)

// runUnit runs one caller's unit in a savepoint and records its own error. A unit that met a
// queue lock held elsewhere, lost a deadlock or timed out on a lock is deferred; after
// maxRetries of the latter two it fails.
func (w *writer) runUnit(t *tx, r *storekit.Request) outcome {
	if err := r.Ctx.Err(); err != nil {
		r.Err = err
		return outcomeDone
	}
	r.Err = t.Unit(r.Fn)
	if r.Err == nil || t.broken != nil {
		return outcomeDone
	}
	if errors.Is(r.Err, errBusy) {
		r.Err = nil
		w.retries.Add(1)
		return outcomeDefer
	}
	if !lostLock(r.Err) {
		return outcomeDone
	}
	r.Tries++
	w.retries.Add(1)
	if r.Tries > maxRetries {
		r.Err = fmt.Errorf("gave up after %d lock conflicts: %w", maxRetries, r.Err)
		r.Answer()
		return outcomeGone
	}
	r.Err = nil
	return outcomeDefer
}

// lostLock reports whether err is a deadlock or a lock timeout: the unit did nothing wrong and
// succeeds when run again after the other transaction ends.
func lostLock(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40P01", "55P03", "40001": // deadlock_detected, lock_not_available, serialization_failure
		return true
	}
	return false
}

func dedupe(keys []string) []string {
	seen := make(map[string]bool, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
