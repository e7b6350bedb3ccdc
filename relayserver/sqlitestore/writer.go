package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// FailBeforeCommit and FailAfterCommit are the writer's failpoints (see package failpoint): after
// every unit of a group ran, before COMMIT; and right after COMMIT, before any caller is told.
const (
	FailBeforeCommit = storekit.FailBeforeCommit
	FailAfterCommit  = storekit.FailAfterCommit
)

// writer owns the one write connection. It takes the first waiting unit, opens a transaction,
// runs that unit and every unit that arrives while the group is open (up to maxGroup), then
// commits once and tells every caller of the group. While a commit's fsync runs, new units queue
// up and form the next group, so under load one fsync carries many units.
type writer struct {
	conn          *sql.Conn
	q             *stmtCache
	maxGroup      int
	maxGroupItems int
	queue         *storekit.Queue

	// beforeCommit, when set (tests), runs before COMMIT with the group size; an error fails the
	// commit.
	beforeCommit func(n int) error

	storekit.Counters

	keys writerKeys // committed key ids (keyID)
	// counters holds committed queue counters (counters.go).
	counters counters

	// enrols is the readers' enrolment cache; a transaction that wrote the enrolments table
	// empties it before any of its callers is told.
	enrols *enrolCache
}

// DefaultMaxGroupItems is how many queued items close a group to further units. A group's units
// run one after another on the writer, and their callers only go on (sign their accept
// statements, answer, send more) once it commits, so a long group leaves them all waiting. Under
// batch load without a cap the two cores of the development machine were busy only 77–79% of the
// time, with about 7 pushes of 200 items per commit on average; with groups capped at 1,600 items
// (about 8 per commit on average, none longer) they were busy 94–95% and relay bench --batch 200 went from 31,400–32,700 to 37,800–38,600 items/s in
// one window (800 items: 34,900–36,900; 3,200: 34,100–37,900). Groups of 1-item pushes are
// smaller than that, so they do not change.
const DefaultMaxGroupItems = 1600

func newWriter(conn *sql.Conn, maxGroup, maxGroupItems int, enrols *enrolCache) *writer {
	return &writer{
		enrols:        enrols,
		conn:          conn,
		q:             &stmtCache{conn: conn, stmts: map[string]cachedStmt{}},
		maxGroup:      maxGroup,
		maxGroupItems: maxGroupItems,
		keys:          writerKeys{ids: map[string]int64{}},
		counters:      newCounters(),
		queue:         storekit.NewQueue(4096),
	}
}

func (w *writer) submit(ctx context.Context, fn func(relayserver.Tx) error) error {
	return w.queue.Submit(ctx, fn)
}

func (w *writer) stop() { w.queue.Stop() }

func (w *writer) run() {
	defer func() {
		w.q.close()
		_ = w.conn.Close()
		w.queue.Stopped()
	}()
	for first := w.queue.Wait(); first != nil; first = w.queue.Wait() {
		w.group(first)
	}
}

// group runs one transaction: first, then whatever else is already queued.
//
// Units run without a savepoint of their own while every unit succeeds or fails before writing
// anything, the common case: a savepoint costs two statements and a copy of every page the unit
// touches. When a unit fails after writing, the group's transaction is rolled back and run again
// without it, each unit that had succeeded now in its own savepoint, as is every later unit of the
// group. Units are re-runnable (the Store contract: pgstore re-runs units too).
func (w *writer) group(first *storekit.Request) {
	start := time.Now()
	batch := []*storekit.Request{first}
	t, err := w.begin(false)
	if err != nil {
		storekit.Fail(batch, err)
		return
	}
	broken := w.runUnit(t, first)
	if broken == nil {
		batch, broken = w.more(t, batch)
	}
	for errors.Is(broken, errRedo) {
		_, _ = w.q.ExecContext(bg, "ROLLBACK")
		if t, err = w.begin(true); err != nil {
			storekit.Fail(batch, err)
			return
		}
		broken = nil
		for _, r := range batch[:len(batch)-1] {
			if r.Err == nil && broken == nil {
				broken = w.runUnit(t, r)
			}
		}
		if broken == nil {
			batch, broken = w.more(t, batch)
		}
	}
	if broken == nil {
		broken = t.flush(false)
	}
	if broken != nil {
		_, _ = w.q.ExecContext(bg, "ROLLBACK")
		w.settleEnrolments()
		storekit.Fail(batch, fmt.Errorf("%w: %w", broken, relayserver.ErrCommit))
		return
	}
	err = failpoint.Inject(storekit.FailBeforeCommit)
	if err == nil && w.beforeCommit != nil {
		err = w.beforeCommit(len(batch))
	}
	if err == nil {
		_, err = w.q.ExecContext(bg, "COMMIT")
	}
	if err != nil {
		_, _ = w.q.ExecContext(bg, "ROLLBACK")
		w.settleEnrolments()
		w.counters.reset() // a failed COMMIT may still have reached disk
		storekit.Fail(batch, fmt.Errorf("commit: %w: %w", err, relayserver.ErrCommit))
		return
	}
	w.counters.committed(&t.p)
	_ = failpoint.Inject(storekit.FailAfterCommit)
	w.settleEnrolments()
	w.Committed(batch, start)
}

// settleEnrolments empties the enrolment cache when the transaction just ended wrote the
// enrolments table (whether it committed or not: a failed COMMIT may still have reached disk).
func (w *writer) settleEnrolments() {
	if w.q.enrolWrites {
		w.q.enrolWrites = false
		w.enrols.invalidate()
	}
}

// more runs the units already queued in t, up to maxGroup units and maxGroupItems inserted
// items, until one breaks the transaction.
func (w *writer) more(t *tx, batch []*storekit.Request) ([]*storekit.Request, error) {
	for len(batch) < w.maxGroup && t.inserted < w.maxGroupItems {
		r := w.queue.Next()
		if r == nil {
			break
		}
		batch = append(batch, r)
		if broken := w.runUnit(t, r); broken != nil {
			return batch, broken
		}
	}
	return batch, nil
}

// begin opens the group's transaction; with savepoints every unit runs in one of its own.
func (w *writer) begin(savepoints bool) (*tx, error) {
	if _, err := w.q.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
		return nil, fmt.Errorf("begin: %w: %w", err, relayserver.ErrCommit)
	}
	return &tx{q: w.q, savepoints: savepoints, keys: &w.keys, c: &w.counters, ec: w.enrols}, nil
}

// runUnit runs one caller's unit and records its own error. It returns non-nil only when the
// transaction itself is no longer usable, or errRedo when the unit failed after writing outside a
// savepoint.
func (w *writer) runUnit(t *tx, r *storekit.Request) (broken error) {
	if err := r.Ctx.Err(); err != nil {
		r.Err = err
		return nil
	}
	if t.savepoints {
		r.Err = t.Unit(r.Fn)
		return t.broken
	}
	w.q.dirty = false
	r.Err = t.call(r.Fn)
	if r.Err != nil && w.q.dirty && t.broken == nil {
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
	// enrolWrites records that a statement that may write the enrolments table ran since the
	// writer last settled the enrolment cache.
	enrolWrites bool
}

type cachedStmt struct {
	st    *sql.Stmt
	write bool // anything but a SELECT
	enrol bool // a write that names the enrolments table
}

func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	cs, ok := c.stmts[query]
	if !ok {
		st, err := c.conn.PrepareContext(ctx, query)
		if err != nil {
			// The caller runs the text directly: it may write anything.
			c.dirty, c.enrolWrites = true, true
			return nil, err
		}
		cs = cachedStmt{st: st, write: !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(query)), "SELECT")}
		cs.enrol = cs.write && writesEnrolments(query)
		c.stmts[query] = cs
	}
	c.dirty = c.dirty || cs.write
	c.enrolWrites = c.enrolWrites || cs.enrol
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
