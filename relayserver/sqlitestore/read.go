package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

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
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
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
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return ad, fmt.Errorf("sqlitestore: %w", err)
	}
	return ad, err
}

// SenderList implements relayserver.Store.
func (s *Store) SenderList(ctx context.Context, target string) (relayserver.SenderList, error) {
	l, err := getSenderList(ctx, s.rq, target)
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
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
	p, err := s.pull(ctx, target, after, max(limit, 1), maxBytes)
	if err != nil {
		return relayserver.Page{}, fmt.Errorf("sqlitestore: pull: %w", err)
	}
	return p, nil
}

// PullWires implements relayserver.WirePuller: Pull without the wire hash and times, into buf.
// The head and the page come from one statement (pullPageSQL), so from one snapshot without a
// transaction, and each item is one row of one column.
func (s *Store) PullWires(ctx context.Context, target string, after int64, limit int, maxBytes int64, buf *relayserver.PullBuf) (relayserver.Page, error) {
	p, err := s.pullWires(ctx, target, after, max(limit, 1), maxBytes, buf)
	if err != nil {
		return relayserver.Page{}, fmt.Errorf("sqlitestore: pull: %w", err)
	}
	return p, nil
}

// pullPageSQL reads a pull in one statement of one text column: first the head row,
// "<head seq>,<acked through>,", then one row per item,
//
//	"<seq>,<sender id>,<bytes of kind>,<bytes of item_id>," || kind || item_id || wire
//
// (numbers in decimal, then the values' bytes as stored: item ids are arbitrary text). One
// statement is one snapshot: the head is never older than the page. One column because every
// column a row hands over costs calls into SQLite under its connection mutex (type, value,
// length), and those calls were most of a pull's CPU. No ORDER BY and no LIMIT: either makes
// SQLite run the arms as co-routines and copy every row once more. The order is that of the
// plan, the head row, then the range scan of the items b-tree (keyed by target, seq), which
// pullWires checks (a plan that ever read otherwise fails the pull, it cannot reorder a page);
// reading stops after the first row past the page.
const pullPageSQL = `SELECT printf('%d,%d,',
	COALESCE((SELECT next_seq - 1 FROM seqs WHERE target_pubkey = ?1), 0),
	COALESCE((SELECT acked_through FROM acked WHERE target_pubkey = ?1), 0))
UNION ALL
SELECT printf('%d,%d,%d,%d,', seq, sender, octet_length(kind), octet_length(item_id)) || kind || item_id || wire
	FROM items WHERE target = ?2 AND seq > ?3`

// errOrder is a pull statement whose items did not come in seq order after the pull's seq.
var errOrder = errors.New("pull: items not in seq order")

// pullWires reads a page into buf (nil: fresh memory), stopping at the first item past the
// limits (so at most one wire beyond the page is read). It runs pullPageSQL on a connection of
// the pool through the driver (database/sql would convert each value once more), with the
// statement prepared for that connection (pageStmts). Senders are looked up once the connection is back in the pool: a
// lookup that misses the cache takes a read connection, and holding one while waiting for
// another could wait forever with a small pool.
func (s *Store) pullWires(ctx context.Context, target string, after int64, limit int, maxBytes int64, buf *relayserver.PullBuf) (relayserver.Page, error) {
	var p relayserver.Page
	if buf == nil {
		buf = new(relayserver.PullBuf)
	}
	buf.Reset()
	tid, err := s.rk.id(ctx, s.rq, target)
	if err != nil {
		return p, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return p, err
	}
	var senders pageSenders
	err = conn.Raw(func(dc any) error {
		// With no id (a key the store never queued for) the page is empty: ids start at 1.
		return s.readPage(ctx, dc, pageQuery{target, tid, after, limit, maxBytes}, &p, buf, &senders)
	})
	if cerr := conn.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return relayserver.Page{}, err
	}
	if err := senders.resolve(ctx, s.rk, s.rq, buf.Items); err != nil {
		return relayserver.Page{}, err
	}
	if len(buf.Items) > 0 {
		p.Items = buf.Items
	}
	return p, nil
}

// pageQuery is what a pull asks for.
type pageQuery struct {
	target   string
	tid      int64
	after    int64
	limit    int
	maxBytes int64
}

// readPage runs pullPageSQL on the driver connection dc, the head into p and the items into buf.
func (s *Store) readPage(ctx context.Context, dc any, q pageQuery, p *relayserver.Page, buf *relayserver.PullBuf, senders *pageSenders) error {
	st, release, err := s.rq.page.get(ctx, dc)
	if err != nil {
		return err
	}
	defer release()
	sq, ok := st.(driver.StmtQueryContext)
	if !ok {
		return fmt.Errorf("driver statement %T cannot query with a context", st)
	}
	rows, err := sq.QueryContext(ctx, []driver.NamedValue{{Ordinal: 1, Value: q.target},
		{Ordinal: 2, Value: q.tid}, {Ordinal: 3, Value: q.after}})
	if err != nil {
		return err
	}
	defer rows.Close()
	row := make([]driver.Value, 1)
	if err := rows.Next(row); err != nil {
		return fmt.Errorf("pull: head row: %w", err)
	}
	if p.HeadSeq, p.AckedThrough, err = unpackHead(row[0]); err != nil {
		return err
	}
	var total int64
	last := q.after
	for {
		if err := rows.Next(row); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		it, err := unpackItem(row[0])
		if err != nil {
			return err
		}
		if it.seq <= last {
			return fmt.Errorf("%w: seq %d after %d", errOrder, it.seq, last)
		}
		last = it.seq
		n := int64(len(it.wire))
		if len(buf.Items) == q.limit || (len(buf.Items) > 0 && total+n > q.maxBytes) {
			p.More = true
			break
		}
		start := len(buf.Wires)
		buf.Wires = append(buf.Wires, it.wire...)
		buf.Items = append(buf.Items, relayserver.Item{Target: q.target, Seq: it.seq, Kind: kindOf(it.kind),
			ItemID: it.itemID, Sender: senders.pub(s.rk, it.sender, len(buf.Items)),
			Wire: buf.Wires[start:len(buf.Wires):len(buf.Wires)]})
		total += n
	}
	return rows.Close()
}

// packedItem is one item row of pullPageSQL taken apart; the strings share the row's memory.
type packedItem struct {
	seq, sender  int64
	kind, itemID string
	wire         string
}

// unpackHead takes apart the head row of pullPageSQL.
func unpackHead(v driver.Value) (head, acked int64, err error) {
	packed, ok := v.(string)
	var ok1, ok2 bool
	if ok {
		head, packed, ok1 = cutInt(packed)
		acked, packed, ok2 = cutInt(packed)
	}
	if !ok || !ok1 || !ok2 || packed != "" {
		return 0, 0, fmt.Errorf("pull: malformed head row %q", v)
	}
	return head, acked, nil
}

// unpackItem takes apart an item row of pullPageSQL.
func unpackItem(v driver.Value) (packedItem, error) {
	packed, ok := v.(string)
	if !ok {
		return packedItem{}, fmt.Errorf("pull: item row is %T, want text", v)
	}
	var it packedItem
	var kindLen, idLen int64
	var ok1, ok2, ok3, ok4 bool
	it.seq, packed, ok1 = cutInt(packed)
	it.sender, packed, ok2 = cutInt(packed)
	kindLen, packed, ok3 = cutInt(packed)
	idLen, packed, ok4 = cutInt(packed)
	if !ok1 || !ok2 || !ok3 || !ok4 || kindLen < 0 || idLen < 0 || kindLen+idLen > int64(len(packed)) {
		return packedItem{}, fmt.Errorf("pull: malformed item row (seq %d)", it.seq)
	}
	it.kind, it.itemID, it.wire = packed[:kindLen], packed[kindLen:kindLen+idLen], packed[kindLen+idLen:]
	return it, nil
}

// cutInt cuts a decimal integer (as printf's %d writes an int64) and the comma after it off the
// front of s.
func cutInt(s string) (n int64, rest string, ok bool) {
	i, neg := 0, false
	if len(s) > 0 && s[0] == '-' {
		i, neg = 1, true
	}
	start := i
	var u uint64
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if i-start == 19 {
			return 0, s, false // more digits than any int64 has
		}
		u = u*10 + uint64(s[i]-'0')
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++ // -9223372036854775808
	}
	if i == start || i == len(s) || s[i] != ',' || u > limit {
		return 0, s, false
	}
	n = int64(u)
	if neg {
		n = -n
	}
	return n, s[i+1:], true
}

// kindOf is the Kind named by s, the kinds the relay queues without a copy.
func kindOf(s string) relayserver.Kind {
	switch s {
	case string(relayserver.KindEnvelope):
		return relayserver.KindEnvelope
	case string(relayserver.KindReceipt):
		return relayserver.KindReceipt
	case string(relayserver.KindExpired):
		return relayserver.KindExpired
	}
	return relayserver.Kind(s)
}

// pageSenders names the senders of a page from the read cache of keys while the rows are read,
// and remembers the items whose sender the cache lacked for resolve.
type pageSenders struct {
	lastID  int64
	lastPub string
	missing []int // indexes of items whose sender is still to be looked up
	ids     []int64
}

// pub is the key of sender id for item i, "" when the cache does not have it.
func (ps *pageSenders) pub(rk *readKeys, id int64, i int) string {
	if id == ps.lastID && ps.lastPub != "" {
		return ps.lastPub
	}
	rk.mu.Lock()
	pub, ok := rk.pubs[id]
	rk.mu.Unlock()
	if !ok {
		ps.missing, ps.ids = append(ps.missing, i), append(ps.ids, id)
		return ""
	}
	ps.lastID, ps.lastPub = id, pub
	return pub
}

// resolve looks up the senders pub did not find and sets them on items.
func (ps *pageSenders) resolve(ctx context.Context, rk *readKeys, q querier, items []relayserver.Item) error {
	for k, i := range ps.missing {
		if i >= len(items) {
			break // the row past the limits: not in the page
		}
		pub, err := rk.pub(ctx, q, ps.ids[k])
		if err != nil {
			return err
		}
		items[i].Sender = pub
	}
	return nil
}

const pullSQL = `SELECT seq, kind, item_id, sender, wire, wire_hash, accepted_at, expires_at FROM items
WHERE target = ? AND seq > ? ORDER BY seq LIMIT ?`

// pull reads a page with each item's wire hash and times.
func (s *Store) pull(ctx context.Context, target string, after int64, limit int, maxBytes int64) (relayserver.Page, error) {
	var p relayserver.Page
	buf := new(relayserver.PullBuf)
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
	rows, err := q.QueryContext(ctx, pullSQL, tid, after, limit+1)
	if err != nil {
		return p, err
	}
	defer rows.Close()
	var sc pullScan
	dest := []any{&sc.seq, &sc.kind, &sc.itemID, &sc.sender, &sc.wire, hashCol{&sc.hash}, &sc.acc, &sc.exp}
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
		it.WireHash, it.AcceptedAt, it.ExpiresAt = sc.hash, storekit.FromMS(sc.acc), storekit.FromMS(sc.exp)
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
	return relayserver.Item{Target: target, Seq: seq, Kind: kindOf(string(sc.kind)), ItemID: sc.itemID,
		Sender: sc.lastPub, Wire: buf.AddWire(sc.wire)}, nil
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
	page    pageStmts // pullPageSQL, prepared on the driver connections of the pool
}

// pageStmts keeps pullPageSQL prepared on each driver connection of the pool a pull has used
// (preparing it took as long as reading a 100-item page). A statement is only ever used inside
// sql.Conn.Raw of its own connection, which database/sql hands to one caller at a time. close
// finalizes them before the pool closes its connections (SQLite keeps a connection with an
// unfinalized statement open: its file, and the WAL it would clean up on close).
type pageStmts struct {
	mu     sync.Mutex
	m      map[any]driver.Stmt // by driver connection
	closed bool
}

// maxPageStmts bounds pageStmts: the pool has a few connections, and replaces one only when it
// went bad.
const maxPageStmts = 64

// get returns pullPageSQL prepared on dc, and what to call once done with it.
func (c *pageStmts) get(ctx context.Context, dc any) (driver.Stmt, func(), error) {
	c.mu.Lock()
	st, ok := c.m[dc]
	c.mu.Unlock()
	if ok {
		return st, func() {}, nil
	}
	prep, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, nil, fmt.Errorf("driver connection %T cannot prepare with a context", dc)
	}
	st, err := prep.PrepareContext(ctx, pullPageSQL)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.m) >= maxPageStmts {
		return st, func() { _ = st.Close() }, nil // for this pull only
	}
	if c.m == nil {
		c.m = map[any]driver.Stmt{}
	}
	c.m[dc] = st
	return st, func() {}, nil
}

// close finalizes the statements on the connections of db. It takes every connection the pool
// has open, waiting for those in use (a bounded time), and finalizes the statement of each inside
// its Raw; a statement whose connection the pool dropped as bad is left (its connection is gone).
func (c *pageStmts) close(db *sql.DB) {
	c.mu.Lock()
	c.closed = true
	left := len(c.m)
	c.mu.Unlock()
	if left == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []*sql.Conn
	defer func() {
		for _, conn := range held {
			_ = conn.Close()
		}
	}()
	for left > 0 && len(held) < db.Stats().OpenConnections {
		conn, err := db.Conn(ctx)
		if err != nil {
			return
		}
		held = append(held, conn)
		_ = conn.Raw(func(dc any) error {
			c.mu.Lock()
			st, ok := c.m[dc]
			delete(c.m, dc)
			left = len(c.m)
			c.mu.Unlock()
			if ok {
				_ = st.Close()
			}
			return nil
		})
	}
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
	c.page.close(c.db)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}
