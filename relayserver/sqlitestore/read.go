package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// Enrolment implements relayserver.Store. Enrolments read are kept in memory until a transaction
// writes the enrolments table (enrolCache): every signed request looks its caller up.
func (s *Store) Enrolment(ctx context.Context, pubkey string) (relayserver.Enrolment, error) {
	e, gen, ok := s.ec.get(pubkey)
	if ok {
		return e, nil
	}
	e, err := getEnrolment(ctx, s.rq, pubkey)
	if err != nil && err != relayserver.ErrNotFound {
		return e, fmt.Errorf("sqlitestore: enrolment: %w", err)
	}
	if err == nil {
		s.ec.put(pubkey, e, gen)
	}
	return e, err
}

// EnrolmentsByName implements relayserver.Store.
func (s *Store) EnrolmentsByName(ctx context.Context, name string, limit int) ([]relayserver.Enrolment, error) {
	rows, err := s.rq.QueryContext(ctx, "SELECT "+storekit.EnrolmentCols+` FROM enrolments
WHERE host_name = ? COLLATE NOCASE AND revoked_at IS NULL ORDER BY enrolled_at, host_pubkey LIMIT ?`,
		name, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: enrolments by name: %w", err)
	}
	defer rows.Close()
	out, err := storekit.ScanEnrolments(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: enrolments by name: %w", err)
	}
	return out, nil
}

// EncAd implements relayserver.Store.
func (s *Store) EncAd(ctx context.Context, pubkey string) (relayserver.EncAd, error) {
	ad, err := getEncAd(ctx, s.rq, pubkey)
	if err != nil && err != relayserver.ErrNotFound {
		return ad, fmt.Errorf("sqlitestore: %w", err)
	}
	return ad, err
}

// SenderList implements relayserver.Store.
func (s *Store) SenderList(ctx context.Context, target string) (relayserver.SenderList, error) {
	l, err := getSenderList(ctx, s.rq, target)
	if err != nil && err != relayserver.ErrNotFound {
		return l, fmt.Errorf("sqlitestore: %w", err)
	}
	return l, err
}

// Head implements relayserver.Store.
func (s *Store) Head(ctx context.Context, target string) (relayserver.Head, error) {
	h, err := getHead(ctx, s.rq, target)
	if err != nil {
		return h, fmt.Errorf("sqlitestore: %w", err)
	}
	return h, nil
}

// Pull implements relayserver.Store. It reads in one read transaction, with the pool's prepared
// statements: the head, then the page in one pass that stops at the first item past the limits
// (so at most one wire beyond the page is read).
func (s *Store) Pull(ctx context.Context, target string, after int64, limit int, maxBytes int64) (relayserver.Page, error) {
	p, err := s.pull(ctx, target, after, max(limit, 1), maxBytes, true, nil)
	if err != nil {
		return relayserver.Page{}, fmt.Errorf("sqlitestore: pull: %w", err)
	}
	return p, nil
}

// PullWires implements relayserver.WirePuller: Pull reading four columns fewer per item (no
// wire hash to turn into hex, no times), into buf.
func (s *Store) PullWires(ctx context.Context, target string, after int64, limit int, maxBytes int64, buf *relayserver.PullBuf) (relayserver.Page, error) {
	p, err := s.pull(ctx, target, after, max(limit, 1), maxBytes, false, buf)
	if err != nil {
		return relayserver.Page{}, fmt.Errorf("sqlitestore: pull: %w", err)
	}
	return p, nil
}

const (
	pullSQL = `SELECT seq, kind, item_id, sender, wire, wire_hash, accepted_at, expires_at FROM items
WHERE target = ? AND seq > ? ORDER BY seq LIMIT ?`
	pullWiresSQL = `SELECT seq, kind, item_id, sender, wire FROM items
WHERE target = ? AND seq > ? ORDER BY seq LIMIT ?`
)

// pull reads a page into buf (nil: fresh memory); full adds each item's wire hash and times.
func (s *Store) pull(ctx context.Context, target string, after int64, limit int, maxBytes int64, full bool, buf *relayserver.PullBuf) (relayserver.Page, error) {
	var p relayserver.Page
	if buf == nil {
		buf = new(relayserver.PullBuf)
	}
	buf.Reset()
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return p, err
	}
	defer sqlTx.Rollback() //nolint:errcheck // read only
	q := txStmts{tx: sqlTx, stmts: s.rq}
	if p.Head, err = getHead(ctx, q, target); err != nil {
		return p, err
	}
	tid, err := s.rk.id(ctx, q, target)
	if err != nil || tid == 0 {
		return p, err // no id: a key the store never queued for
	}
	query := pullWiresSQL
	if full {
		query = pullSQL
	}
	rows, err := q.QueryContext(ctx, query, tid, after, limit+1)
	if err != nil {
		return p, err
	}
	defer rows.Close()
	var sc pullScan
	dest := sc.dest(full)
	var total int64
	for rows.Next() {
		// The integers scan into interfaces and the bytes into the driver's own memory (copied
		// into buf below): the cheap paths of database/sql.
		if err := rows.Scan(dest...); err != nil {
			return p, err
		}
		n := int64(len(sc.wire)) // the bytes column, without reading it
		if len(buf.Items) == limit || (len(buf.Items) > 0 && total+n > maxBytes) {
			p.More = true
			break
		}
		it, err := s.pullItem(ctx, q, &sc, target, buf)
		if err != nil {
			return p, err
		}
		if full {
			it.WireHash, it.AcceptedAt, it.ExpiresAt = sc.hash, storekit.FromMS(sc.acc), storekit.FromMS(sc.exp)
		}
		buf.Items = append(buf.Items, it)
		total += n
	}
	if len(buf.Items) > 0 {
		p.Items = buf.Items
	}
	return p, rows.Err()
}

// pullScan holds the columns of one row of a pull.
type pullScan struct {
	seq, sender  any // int64
	kind, wire   sql.RawBytes
	itemID, hash string
	acc, exp     int64
	// The key of the last sender id read: a page's items mostly share a few senders.
	lastSender int64
	lastPub    string
}

func (sc *pullScan) dest(full bool) []any {
	if full {
		return []any{&sc.seq, &sc.kind, &sc.itemID, &sc.sender, &sc.wire, hashCol{&sc.hash}, &sc.acc, &sc.exp}
	}
	return []any{&sc.seq, &sc.kind, &sc.itemID, &sc.sender, &sc.wire}
}

// pullItem is the item of the row in sc, its wire copied into buf.
func (s *Store) pullItem(ctx context.Context, q querier, sc *pullScan, target string, buf *relayserver.PullBuf) (relayserver.Item, error) {
	seq, ok1 := sc.seq.(int64)
	sender, ok2 := sc.sender.(int64)
	if !ok1 || !ok2 {
		return relayserver.Item{}, fmt.Errorf("items row: seq %T, sender %T, want integers", sc.seq, sc.sender)
	}
	if sender != sc.lastSender || sc.lastPub == "" {
		pub, err := s.rk.pub(ctx, q, sender)
		if err != nil {
			return relayserver.Item{}, err
		}
		sc.lastSender, sc.lastPub = sender, pub
	}
	return relayserver.Item{Target: target, Seq: seq, Kind: kindOf(sc.kind), ItemID: sc.itemID,
		Sender: sc.lastPub, Wire: buf.AddWire(sc.wire)}, nil
}

// kindOf is the Kind named by b, without a copy for the kinds the relay queues.
func kindOf(b []byte) relayserver.Kind {
	switch string(b) {
	case string(relayserver.KindEnvelope):
		return relayserver.KindEnvelope
	case string(relayserver.KindReceipt):
		return relayserver.KindReceipt
	case string(relayserver.KindExpired):
		return relayserver.KindExpired
	}
	return relayserver.Kind(b)
}

// txStmts runs the pool's prepared statements inside one read transaction.
type txStmts struct {
	tx    *sql.Tx
	stmts *readStmts
}

func (q txStmts) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.tx.ExecContext(ctx, query, args...)
}

func (q txStmts) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := q.stmts.cached(query); st != nil {
		return q.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	q.stmts.prepareSoon(query)
	return q.tx.QueryContext(ctx, query, args...)
}

func (q txStmts) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := q.stmts.cached(query); st != nil {
		return q.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	q.stmts.prepareSoon(query)
	return q.tx.QueryRowContext(ctx, query, args...)
}

// readStmts prepares each read statement once for the pool (database/sql prepares it on each
// read connection as needed); it is the querier of the Store's reads. Preparing for the pool
// takes a free connection, so it never runs while the caller holds one (a transaction's reads
// go unprepared until the statement is ready; see txStmts) and never under mu: otherwise reads
// holding every connection of the pool would each wait for another one, forever.
type readStmts struct {
	db      *sql.DB
	mu      sync.Mutex
	m       map[string]*sql.Stmt
	pending map[string]bool // statements being prepared by prepareSoon
	preps   sync.WaitGroup  // the goroutines of prepareSoon
	closed  bool
}

// cached returns the pool's statement for query, or nil while it has none.
func (c *readStmts) cached(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// stmt returns the pool's statement for query, preparing it first if needed. The caller must
// not hold a connection of the pool.
func (c *readStmts) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := c.cached(query); st != nil {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.m[query]; ok || c.closed {
		_ = st.Close() // prepared meanwhile by another read, or the store is closing
		return have, nil
	}
	c.m[query] = st
	return st, nil
}

// prepareSoon prepares query for the pool in the background, once a connection is free.
func (c *readStmts) prepareSoon(query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[query] || c.closed {
		return
	}
	if c.pending == nil {
		c.pending = map[string]bool{}
	}
	c.pending[query] = true
	c.preps.Add(1)
	go func() {
		defer c.preps.Done()
		_, _ = c.stmt(context.Background(), query) // a failure leaves reads unprepared; a closed pool ends the wait
		c.mu.Lock()
		delete(c.pending, query)
		c.mu.Unlock()
	}()
}

func (c *readStmts) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.db.ExecContext(ctx, query, args...)
}

func (c *readStmts) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (c *readStmts) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return c.db.QueryRowContext(ctx, query, args...) // carries the error to Scan
	}
	return st.QueryRowContext(ctx, args...)
}

// close closes the pool's statements; prepareSoon starts nothing more, and a prepare still
// running closes what it prepares.
func (c *readStmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}
