package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/relayserver"
)

// Failpoints of the writer (see package failpoint).
const (
	// FailBeforeCommit fires after every unit of a group ran, before COMMIT.
	FailBeforeCommit = "relay.before-commit"
	// FailAfterCommit fires right after COMMIT returned, before any caller is told.
	FailAfterCommit = "relay.after-commit"
)

// writeReq is one caller's unit waiting for the writer.
type writeReq struct {
	ctx  context.Context
	fn   func(relayserver.Tx) error
	err  error
	done chan struct{}
}

// writer owns the one write connection. It takes the first waiting unit, opens a transaction,
// runs that unit and every unit that arrives while the group is open (up to maxGroup) each in its
// own savepoint, then commits once and tells every caller of the group. While a commit's fsync
// runs, new units queue up and form the next group, so under load one fsync carries many units.
type writer struct {
	conn     *sql.Conn
	q        *stmtCache
	maxGroup int
	reqs     chan *writeReq
	quit     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once

	// beforeCommit, when set (tests), runs before COMMIT with the group size; an error fails the
	// commit.
	beforeCommit func(n int) error

	commits, units atomic.Int64 // committed transactions and the units they carried

	keys writerKeys // committed key ids (keyID)

	// report, when set (ReportCommits), is told each commit's units and duration.
	report atomic.Pointer[func(units int, took time.Duration)]
}

func newWriter(conn *sql.Conn, maxGroup int) *writer {
	return &writer{
		conn:     conn,
		q:        &stmtCache{conn: conn, stmts: map[string]cachedStmt{}},
		maxGroup: maxGroup,
		keys:     writerKeys{ids: map[string]int64{}},
		reqs:     make(chan *writeReq, 4096),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
}

func (w *writer) submit(ctx context.Context, fn func(relayserver.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case <-w.quit:
		return relayserver.ErrClosed
	default:
	}
	select {
	case w.reqs <- r:
	case <-w.quit:
		return relayserver.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return r.err
	case <-w.stopped:
		select {
		case <-r.done:
			return r.err
		default:
			return relayserver.ErrClosed
		}
	case <-ctx.Done():
		// The unit may still commit; the caller only stops waiting. Its client retries, and
		// dedup turns the retry into a duplicate.
		return fmt.Errorf("waiting for commit: %w", ctx.Err())
	}
}

func (w *writer) stop() {
	w.stopOnce.Do(func() { close(w.quit) })
	<-w.stopped
}

func (w *writer) run() {
	defer func() {
		w.q.close()
		_ = w.conn.Close()
		close(w.stopped)
	}()
	for {
		var first *writeReq
		select {
		case first = <-w.reqs:
		case <-w.quit:
			w.failQueued()
			return
		}
		w.group(first)
	}
}

// failQueued answers every unit still queued at shutdown.
func (w *writer) failQueued() {
	for {
		select {
		case r := <-w.reqs:
			r.err = relayserver.ErrClosed
			close(r.done)
		default:
			return
		}
	}
}

// group runs one transaction: first, then whatever else is already queued.
//
// Units run without a savepoint of their own while every unit succeeds or fails before writing
// anything, the common case: a savepoint costs two statements and a copy of every page the unit
// touches. When a unit fails after writing, the group's transaction is rolled back and run again
// without it, each unit that had succeeded now in its own savepoint, as is every later unit of the
// group. Units are re-runnable (the Store contract: pgstore re-runs units too).
func (w *writer) group(first *writeReq) {
	start := time.Now()
	batch := []*writeReq{first}
	t, err := w.begin(false)
	if err != nil {
		w.finish(batch, err)
		return
	}
	broken := w.runUnit(t, first)
	for broken == nil && len(batch) < w.maxGroup {
		var r *writeReq
		select {
		case r = <-w.reqs:
		default:
		}
		if r == nil {
			break
		}
		batch = append(batch, r)
		broken = w.runUnit(t, r)
	}
	for errors.Is(broken, errRedo) {
		_, _ = w.q.ExecContext(bg, "ROLLBACK")
		if t, err = w.begin(true); err != nil {
			w.finish(batch, err)
			return
		}
		broken = nil
		for _, r := range batch[:len(batch)-1] {
			if r.err == nil && broken == nil {
				broken = w.runUnit(t, r)
			}
		}
		for broken == nil && len(batch) < w.maxGroup {
			var r *writeReq
			select {
			case r = <-w.reqs:
			default:
			}
			if r == nil {
				break
			}
			batch = append(batch, r)
			broken = w.runUnit(t, r)
		}
	}
	if broken != nil {
		_, _ = w.q.ExecContext(bg, "ROLLBACK")
		w.finish(batch, fmt.Errorf("%w: %w", broken, relayserver.ErrCommit))
		return
	}
	err = failpoint.Inject(FailBeforeCommit)
	if err == nil && w.beforeCommit != nil {
		err = w.beforeCommit(len(batch))
	}
	if err == nil {
		_, err = w.q.ExecContext(bg, "COMMIT")
	}
	if err != nil {
		_, _ = w.q.ExecContext(bg, "ROLLBACK")
		w.finish(batch, fmt.Errorf("commit: %w: %w", err, relayserver.ErrCommit))
		return
	}
	_ = failpoint.Inject(FailAfterCommit)
	w.commits.Add(1)
	w.units.Add(int64(len(batch)))
	if f := w.report.Load(); f != nil {
		(*f)(len(batch), time.Since(start))
	}
	for _, r := range batch {
		close(r.done)
	}
}

// begin opens the group's transaction; with savepoints every unit runs in one of its own.
func (w *writer) begin(savepoints bool) (*tx, error) {
	if _, err := w.q.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
		return nil, fmt.Errorf("begin: %w: %w", err, relayserver.ErrCommit)
	}
	return &tx{q: w.q, savepoints: savepoints, keys: &w.keys}, nil
}

// finish fails every unit of a group whose transaction did not commit.
func (w *writer) finish(batch []*writeReq, err error) {
	for _, r := range batch {
		r.err = err
		close(r.done)
	}
}

// runUnit runs one caller's unit and records its own error. It returns non-nil only when the
// transaction itself is no longer usable, or errRedo when the unit failed after writing outside a
// savepoint.
func (w *writer) runUnit(t *tx, r *writeReq) (broken error) {
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return nil
	}
	if t.savepoints {
		r.err = t.Unit(r.fn)
		return t.broken
	}
	w.q.dirty = false
	r.err = t.call(r.fn)
	if r.err != nil && w.q.dirty && t.broken == nil {
		return errRedo
	}
	return t.broken
}

// stmtCache prepares each statement once on the writer connection. dirty records that a
// statement that may write ran since it was last cleared.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]cachedStmt
	dirty bool
}

type cachedStmt struct {
	st    *sql.Stmt
	write bool // anything but a SELECT
}

func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	cs, ok := c.stmts[query]
	if !ok {
		st, err := c.conn.PrepareContext(ctx, query)
		if err != nil {
			c.dirty = true // the caller runs the text directly: it may write
			return nil, err
		}
		cs = cachedStmt{st: st, write: !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(query)), "SELECT")}
		c.stmts[query] = cs
	}
	c.dirty = c.dirty || cs.write
	return cs.st, nil
}

func (c *stmtCache) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.dirty = true
	st, err := c.stmt(ctx, query)
	if err != nil {
		// Multi-statement text cannot be prepared; run it directly.
		return c.conn.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmtCache) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (c *stmtCache) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return c.conn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (c *stmtCache) close() {
	for _, cs := range c.stmts {
		_ = cs.st.Close()
	}
}

var errBroken = errors.New("transaction unusable after a failed rollback")

// errRedo asks group to run its transaction again with savepoints.
var errRedo = errors.New("a unit failed after writing outside a savepoint")
