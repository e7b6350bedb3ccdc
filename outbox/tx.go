package outbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/bbolt"
)

// Tx is the outbox seen through one bbolt transaction: the caller's own (Store.In), or one that
// Store.Update, Store.Batch or Store.View opened. It is valid only while that transaction is.
//
// Every mutating method validates its input and the row's state before it writes anything: when
// it returns an error, nothing in the transaction has changed, and the caller may decide whether
// to go on or roll back. Each method reads the Store's clock once.
type Tx struct {
	s   *Store
	tx  *bbolt.Tx
	b   buckets
	err error // ErrNoBuckets when Open never ran on this database
}

// In returns the outbox view of tx, a transaction the caller opened on the Store's database.
// Use it to commit an outbox change together with the caller's own buckets:
//
//	err := db.Update(func(tx *bbolt.Tx) error {
//		if err := saveReceipt(tx, rec); err != nil {
//			return err
//		}
//		_, _, err := store.In(tx).Settle(rec.Msg, host)
//		return err
//	})
func (s *Store) In(tx *bbolt.Tx) *Tx {
	b, err := openBuckets(tx)
	return &Tx{s: s, tx: tx, b: b, err: err}
}

// Bolt returns the underlying bbolt transaction.
func (t *Tx) Bolt() *bbolt.Tx { return t.tx }

func (t *Tx) now() time.Time { return msTime(t.s.clock()) }

// backoff is Backoff(attempts) with the Store's jitter.
func (t *Tx) backoff(attempts int) time.Duration {
	return Jittered(Backoff(attempts), t.s.jitter())
}

func (t *Tx) readable(op string) error {
	if t.err != nil {
		return fmt.Errorf("outbox: %s: %w", op, t.err)
	}
	return nil
}

func (t *Tx) writable(op string) error {
	if err := t.readable(op); err != nil {
		return err
	}
	if !t.tx.Writable() {
		return fmt.Errorf("outbox: %s: %w", op, ErrReadOnly)
	}
	return nil
}

// getRow reads and decodes the row at rk.
func (t *Tx) getRow(rk []byte) (Row, error) {
	v := t.b.rows.Get(rk)
	if v == nil {
		return Row{}, ErrNotFound
	}
	return decodeRow(v)
}

// withWire attaches a copy of the row's wire bytes.
func (t *Tx) withWire(r *Row, rk []byte) error {
	w := t.b.wire.Get(rk)
	if w == nil {
		return fmt.Errorf("%w: wire bytes of %s missing", ErrCorrupt, r.Key())
	}
	r.Wire = bytes.Clone(w)
	return nil
}

// put writes new and moves every index entry from what old owned to what new owns. old is nil
// for a new row. It is the only place rows are written, so the indexes cannot drift apart.
func (t *Tx) put(old, r *Row) error {
	if !r.due() {
		r.NextAt = time.Time{}
	}
	rk := rowKey(r.Key())
	ne := entriesOf(r, rk)
	var oe indexEntries
	if old != nil {
		oe = entriesOf(old, rk)
	}
	empty := []byte{}
	for _, ix := range []struct {
		b            *bbolt.Bucket
		oldK, newK   []byte
		oldV, newV   []byte
		compareValue bool
	}{
		{t.b.due, oe.due, ne.due, nil, empty, false},
		{t.b.host, oe.host, ne.host, oe.hostVal, ne.hostVal, true},
		{t.b.relay, oe.relay, ne.relay, nil, empty, false},
		{t.b.deadline, oe.deadline, ne.deadline, nil, empty, false},
		{t.b.ended, oe.ended, ne.ended, nil, empty, false},
		{t.b.created, oe.created, ne.created, oe.createdVal, ne.createdVal, true},
	} {
		same := bytes.Equal(ix.oldK, ix.newK) && (ix.oldK == nil) == (ix.newK == nil)
		if same && (!ix.compareValue || bytes.Equal(ix.oldV, ix.newV)) {
			continue
		}
		if ix.oldK != nil && !same {
			if err := ix.b.Delete(ix.oldK); err != nil {
				return err
			}
		}
		if ix.newK != nil {
			if err := ix.b.Put(ix.newK, ix.newV); err != nil {
				return err
			}
		}
	}
	return t.b.rows.Put(rk, encodeRow(r))
}

// remove deletes a row, its wire bytes and its index entries.
func (t *Tx) remove(r *Row) error {
	rk := rowKey(r.Key())
	e := entriesOf(r, rk)
	for _, ix := range []struct {
		b *bbolt.Bucket
		k []byte
	}{{t.b.due, e.due}, {t.b.host, e.host}, {t.b.relay, e.relay}, {t.b.deadline, e.deadline}, {t.b.ended, e.ended}, {t.b.created, e.created}} {
		if ix.k != nil {
			if err := ix.b.Delete(ix.k); err != nil {
				return err
			}
		}
	}
	if err := t.b.wire.Delete(rk); err != nil {
		return err
	}
	return t.b.rows.Delete(rk)
}

// Add stores a new pending row and its wire bytes. The row is due at once (next_at = now) and
// its deadline is now + the LAN deadline. A row with the same key is never replaced: Add
// returns ErrExists and leaves it alone.
func (t *Tx) Add(n NewRow) (Row, error) {
	k := Key{ItemID: n.ItemID, Host: n.Host}
	if err := t.writable("add " + k.String()); err != nil {
		return Row{}, err
	}
	msg, err := n.check()
	if err != nil {
		return Row{}, fmt.Errorf("outbox: add %s: %w", k, err)
	}
	rk := rowKey(k)
	if t.b.rows.Get(rk) != nil {
		return Row{}, fmt.Errorf("outbox: add %s: %w", k, ErrExists)
	}
	now := t.now()
	r := Row{
		ItemID: n.ItemID, MsgID: msg, Host: n.Host, HostKey: n.HostKey, Kind: n.Kind,
		Agent: n.Agent, Subject: n.Subject, State: StatePending, Transport: n.Transport,
		CreatedAt: now, UpdatedAt: now, NextAt: now, Deadline: now.Add(t.s.lanDeadline),
	}
	wire := bytes.Clone(n.Wire)
	if err := t.b.wire.Put(rk, wire); err != nil {
		return Row{}, fmt.Errorf("outbox: add %s: %w", k, err)
	}
	if err := t.put(nil, &r); err != nil {
		return Row{}, fmt.Errorf("outbox: add %s: %w", k, err)
	}
	r.Wire = n.Wire // the caller's slice: the stored copy must stay untouched until commit
	return r, nil
}

// Get returns one row with its wire bytes.
func (t *Tx) Get(k Key) (Row, error) {
	op := "get " + k.String()
	if err := t.readable(op); err != nil {
		return Row{}, err
	}
	if err := checkKey(k); err != nil {
		return Row{}, fmt.Errorf("outbox: %s: %w", op, err)
	}
	rk := rowKey(k)
	r, err := t.getRow(rk)
	if err == nil {
		err = t.withWire(&r, rk)
	}
	if err != nil {
		return Row{}, fmt.Errorf("outbox: %s: %w", op, err)
	}
	return r, nil
}

// Due returns the rows whose next_at has come (next_at ≤ now), with their wire bytes, in
// next_at order, at most limit of them (limit ≤ 0: all). It walks the due index only, so it
// costs O(due rows) however many rows wait or have ended.
//
// Due rows are pending rows, and relay-accepted rows with Repush set (which go to the relay
// only: relay-accepted rows are never sent over the LAN). Due does not write: a caller that may
// run two passes at once (a LAN and a relay loop) uses Claim instead.
func (t *Tx) Due(limit int) ([]Row, error) {
	return t.DueWith(DueFilter{Limit: limit})
}

// DueFilter bounds what DueWith reads.
type DueFilter struct {
	// Limit caps the rows returned (≤ 0: no cap).
	Limit int
	// MaxBytes stops the walk once the wire bytes of the rows taken reach it (≤ 0: no cap). The
	// first row is always taken, however large.
	MaxBytes int
	// Skip, when set, passes over the rows of the hosts it returns true for, without reading
	// them (a caller whose send to that host is still in flight).
	Skip func(host string) bool
}

// DueWith is Due within the bounds of f, so that a pass holds a bounded amount of wire bytes
// however many large rows came due at once.
func (t *Tx) DueWith(f DueFilter) ([]Row, error) {
	if err := t.readable("due"); err != nil {
		return nil, err
	}
	rows, err := t.due(t.now(), f)
	if err != nil {
		return nil, fmt.Errorf("outbox: due: %w", err)
	}
	return rows, nil
}

func (t *Tx) due(now time.Time, f DueFilter) ([]Row, error) {
	last := timeBits(now)
	var out []Row
	size := 0
	c := t.b.due.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 9 {
			return nil, fmt.Errorf("%w: due index key %x", ErrCorrupt, k)
		}
		if binary.BigEndian.Uint64(k) > last || (f.Limit > 0 && len(out) >= f.Limit) ||
			(f.MaxBytes > 0 && len(out) > 0 && size >= f.MaxBytes) {
			break
		}
		rk := k[8:]
		if f.Skip != nil {
			key, ok := parseRowKey(rk)
			if !ok {
				return nil, fmt.Errorf("%w: due index key %x", ErrCorrupt, k)
			}
			if f.Skip(key.Host) {
				continue
			}
		}
		r, err := t.getRow(rk)
		if err != nil {
			return nil, fmt.Errorf("%w: due index names a missing row (%v)", ErrCorrupt, err)
		}
		if err := t.withWire(&r, rk); err != nil {
			return nil, err
		}
		size += len(r.Wire)
		out = append(out, r)
	}
	return out, nil
}

// NextDue returns the earliest next_at of any due-tracked row (it may be in the past), or
// ok=false when no row waits. A daemon can sleep until then instead of polling.
func (t *Tx) NextDue() (at time.Time, ok bool, err error) {
	if err := t.readable("next due"); err != nil {
		return time.Time{}, false, err
	}
	k, _ := t.b.due.Cursor().First()
	if k == nil {
		return time.Time{}, false, nil
	}
	if len(k) < 9 {
		return time.Time{}, false, fmt.Errorf("outbox: next due: %w: due index key %x", ErrCorrupt, k)
	}
	return bitsTime(binary.BigEndian.Uint64(k)), true, nil
}

// Claim is Due for a caller that sends from more than one goroutine: it returns the due rows
// (with wire bytes) and moves each one's next_at to now + lease, so another pass does not pick it
// while this attempt runs. The attempt's outcome (MarkAttemptFailed, MarkDelivered, …) replaces
// the lease; if the process dies first, the row is due again when the lease runs out. Claim does
// not count an attempt.
func (t *Tx) Claim(limit int, lease time.Duration) ([]Row, error) {
	if err := t.writable("claim"); err != nil {
		return nil, err
	}
	if lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: %w: lease %v is not positive", ErrInvalid, lease)
	}
	now := t.now()
	rows, err := t.due(now, DueFilter{Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	until := msTime(now.Add(lease))
	for i := range rows {
		old := rows[i]
		old.Wire = nil
		r := old
		r.NextAt, r.UpdatedAt = until, now
		if err := t.put(&old, &r); err != nil {
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		r.Wire = rows[i].Wire
		rows[i] = r
	}
	return rows, nil
}

// mutate runs one transition on one row: fn changes r (a copy of the stored row) or returns an
// error, in which case nothing is written.
func (t *Tx) mutate(op string, k Key, fn func(r *Row, now time.Time) error) (Row, error) {
	opk := fmt.Sprintf("%s %s", op, k)
	if err := t.writable(opk); err != nil {
		return Row{}, err
	}
	if err := checkKey(k); err != nil {
		return Row{}, fmt.Errorf("outbox: %s: %w", opk, err)
	}
	old, err := t.getRow(rowKey(k))
	if err != nil {
		return Row{}, fmt.Errorf("outbox: %s: %w", opk, err)
	}
	r := old
	now := t.now()
	if err := fn(&r, now); err != nil {
		return Row{}, err
	}
	r.UpdatedAt = now
	if err := t.put(&old, &r); err != nil {
		return Row{}, fmt.Errorf("outbox: %s: %w", opk, err)
	}
	return r, nil
}

func illegal(op string, r *Row, cause string) error {
	return &TransitionError{Op: op, Key: r.Key(), From: r.State, Cause: cause}
}

// attemptable checks that an attempt over tr may be recorded on r: a pending row, or a
// relay-accepted row flagged for re-push when tr is the relay.
func attemptable(op string, r *Row, tr Transport) error {
	switch r.State {
	case StatePending:
		return nil
	case StateRelayAccepted:
		if tr != TransportRelay {
			return illegal(op, r, "relay-accepted rows are never sent over the LAN")
		}
		if !r.Repush {
			return illegal(op, r, "the row is not flagged for a re-push")
		}
		return nil
	}
	return illegal(op, r, "")
}

func checkTransport(tr Transport) error {
	if tr != TransportLAN && tr != TransportRelay {
		return fmt.Errorf("%w: transport must be lan or relay, got %q", ErrInvalid, tr.String())
	}
	return nil
}

// MarkDelivered ends a pending row done: the target host answered over the LAN that it stored
// the envelope (or receipt). It counts the attempt and records the LAN as the transport.
// A relay-accepted row is settled by its delivery receipt (Settle), never by a LAN send.
func (t *Tx) MarkDelivered(k Key) (Row, error) {
	const op = "mark delivered"
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if r.State != StatePending {
			return illegal(op, r, "")
		}
		r.State, r.EndedAt, r.Transport = StateDone, now, TransportLAN
		r.Attempts++
		r.LastError, r.Reason = "", ""
		return nil
	})
}

// MarkAttemptFailed records a failed attempt over tr (lan or relay): attempts + 1, lan_failures
// + 1 for the LAN, last_error = cause's text (cleaned of control characters, cut to MaxText), and
// next_at = now + Backoff(attempts before this one) ± JitterSpread. It applies to pending rows and to
// relay-accepted rows flagged for a re-push (relay only). cause must not be nil.
func (t *Tx) MarkAttemptFailed(k Key, tr Transport, cause error) (Row, error) {
	const op = "mark failed"
	if err := checkTransport(tr); err != nil {
		return Row{}, fmt.Errorf("outbox: %s %s: %w", op, k, err)
	}
	var text string
	if cause != nil {
		text = cleanText(cause.Error())
	}
	if text == "" {
		return Row{}, fmt.Errorf("outbox: %s %s: %w: no error given", op, k, ErrInvalid)
	}
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if err := attemptable(op, r, tr); err != nil {
			return err
		}
		r.NextAt = now.Add(t.backoff(r.Attempts))
		r.Attempts++
		if tr == TransportLAN {
			r.LANFailures++
		}
		r.Transport, r.LastError = tr, text
		return nil
	})
}

// Postpone moves a due-tracked row's next_at to until without counting an attempt: for a link
// that asked its sender to pause (a relay's Retry-After, a rate refusal), which says nothing
// about the row. Attempts, lan_failures and the backoff schedule stay as they were; last_error
// becomes note when note is not empty. until must not be before now.
func (t *Tx) Postpone(k Key, until time.Time, note string) (Row, error) {
	const op = "postpone"
	note = cleanText(note)
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if !r.due() {
			return illegal(op, r, "the row is not waiting to be sent")
		}
		if until.Before(now) {
			return fmt.Errorf("outbox: %s %s: %w: until %v is before now", op, k, ErrInvalid, until)
		}
		r.NextAt = msTime(until)
		if note != "" {
			r.LastError = note
		}
		return nil
	})
}

// MarkRejected records that the peer (LAN) or the relay refused the item. A retryable rejection
// (a relay quota or rate limit: "rejected:quota:*", rate) keeps the row where it is with the
// reason in last_error and next_at by backoff; any other ends it rejected with the reason, and
// the caller alerts the sender (Alert). It applies where MarkAttemptFailed does. reason must not
// be empty.
func (t *Tx) MarkRejected(k Key, tr Transport, reason string, retryable bool) (Row, error) {
	const op = "mark rejected"
	if err := checkTransport(tr); err != nil {
		return Row{}, fmt.Errorf("outbox: %s %s: %w", op, k, err)
	}
	reason = cleanText(reason)
	if reason == "" {
		return Row{}, fmt.Errorf("outbox: %s %s: %w: empty reason", op, k, ErrInvalid)
	}
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if err := attemptable(op, r, tr); err != nil {
			return err
		}
		delay := t.backoff(r.Attempts)
		r.Attempts++
		r.Transport, r.LastError = tr, reason
		if retryable {
			r.NextAt = now.Add(delay)
			return nil
		}
		r.State, r.Reason, r.EndedAt, r.Repush = StateRejected, reason, now, false
		return nil
	})
}

// Acceptance is a relay accept statement for one row's target, already verified by the caller
// (signature by the pinned relay key; item_id, host_pubkey and wire_hash matching the row).
type Acceptance struct {
	Relay      string        // relay URL
	Epoch      string        // relay epoch in the statement
	Seq        int64         // the target's seq in the statement (> 0)
	Statement  []byte        // the statement bytes exactly as signed (canonical JSON)
	Sig        string        // the relay's signature over Statement (base64)
	AcceptedAt time.Time     // the statement's "at"
	Retention  time.Duration // the relay's retention (limits.retention_days)
}

func (a *Acceptance) check() error {
	if err := checkText("relay", a.Relay, MaxText, false); err != nil {
		return err
	}
	if err := checkText("epoch", a.Epoch, 256, false); err != nil {
		return err
	}
	if a.Seq <= 0 {
		return fmt.Errorf("%w: seq %d is not positive", ErrInvalid, a.Seq)
	}
	if len(a.Statement) == 0 || len(a.Statement) > MaxStatement {
		return fmt.Errorf("%w: accept statement is empty or longer than %d bytes", ErrInvalid, MaxStatement)
	}
	if err := checkText("statement signature", a.Sig, 512, false); err != nil {
		return err
	}
	if a.AcceptedAt.IsZero() {
		return fmt.Errorf("%w: accepted_at is zero", ErrInvalid)
	}
	if a.Retention <= 0 {
		return fmt.Errorf("%w: retention %v is not positive", ErrInvalid, a.Retention)
	}
	return nil
}

// MarkRelayAccepted records a verified accept statement. An envelope row becomes (or, after a
// re-push, stays) relay-accepted: it leaves the due index, is listed under its relay, and its
// deadline becomes accepted_at + retention + grace (24 h). A receipt row ends done (receipts
// get no delivery receipt of their own). It applies to pending and relay-accepted rows; a
// re-acceptance (after a re-push, or a "duplicate" answer) replaces the relay fields, clears
// Repush and moves the deadline to the new accepted_at, since the relay holds the item from then.
func (t *Tx) MarkRelayAccepted(k Key, a Acceptance) (Row, error) {
	const op = "mark accepted"
	if err := a.check(); err != nil {
		return Row{}, fmt.Errorf("outbox: %s %s: %w", op, k, err)
	}
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if !r.State.Active() {
			return illegal(op, r, "")
		}
		r.Attempts++
		r.Transport = TransportRelay
		r.Relay, r.Epoch, r.Seq = a.Relay, a.Epoch, a.Seq
		r.AcceptedAt = msTime(a.AcceptedAt)
		r.Statement, r.StatementSig = bytes.Clone(a.Statement), a.Sig
		r.Repush, r.LastError = false, ""
		if r.Kind == KindReceipt {
			r.State, r.EndedAt = StateDone, now
			return nil
		}
		r.State = StateRelayAccepted
		r.Deadline = msTime(r.AcceptedAt.Add(a.Retention + t.s.grace))
		return nil
	})
}

// MarkRelaySentV1 records that the v1 relay at relay said it stored the row's item. A v1 relay
// signs nothing, so this is no acceptance: an envelope row stays pending (attempts + 1, the relay
// transport, next_at by backoff, so it is pushed again, which the relay's dedup by id absorbs)
// until its delivery receipt settles it or its deadline ends it, and RelayV1At and Relay say
// where it went. A receipt row ends done, as on a relay's acceptance (receipts get no receipt).
// It applies to pending rows only.
func (t *Tx) MarkRelaySentV1(k Key, relay string) (Row, error) {
	const op = "mark sent through a v1 relay"
	if err := checkText("relay", relay, MaxText, false); err != nil {
		return Row{}, fmt.Errorf("outbox: %s %s: %w", op, k, err)
	}
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if r.State != StatePending {
			return illegal(op, r, "")
		}
		delay := t.backoff(r.Attempts)
		r.Attempts++
		r.Transport, r.Relay, r.RelayV1At, r.LastError = TransportRelay, relay, now, ""
		if r.Kind == KindReceipt {
			r.State, r.EndedAt = StateDone, now
			return nil
		}
		r.NextAt = now.Add(delay)
		return nil
	})
}

// MarkLANUnsigned records that the peer's LAN address said it stored the row's item without a
// LAN accept statement, and that the host takes the peer for one that cannot sign (0.5.x): no
// delivery, as with a v1 relay (MarkRelaySentV1). An envelope row stays pending (attempts + 1,
// the LAN transport, next_at by backoff, so it is sent again, which the peer's dedup by id
// absorbs) until its delivery receipt settles it or its deadline ends it, and LANUnsignedAt
// says when the peer last answered so. A receipt row ends done (receipts get no receipt). It
// applies to pending rows only.
func (t *Tx) MarkLANUnsigned(k Key) (Row, error) {
	const op = "mark stored unsigned over the LAN"
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if r.State != StatePending {
			return illegal(op, r, "")
		}
		delay := t.backoff(r.Attempts)
		r.Attempts++
		r.Transport, r.LANUnsignedAt, r.LastError = TransportLAN, now, ""
		if r.Kind == KindReceipt {
			r.State, r.EndedAt = StateDone, now
			return nil
		}
		r.NextAt = now.Add(delay)
		return nil
	})
}

// MarkExpired ends an active row expired with reason (for example the relay's signed expiry
// notice for a relay-accepted row, or a peer that was removed). The caller alerts the sender.
func (t *Tx) MarkExpired(k Key, reason string) (Row, error) {
	const op = "mark expired"
	reason = cleanText(reason)
	if reason == "" {
		return Row{}, fmt.Errorf("outbox: %s %s: %w: empty reason", op, k, ErrInvalid)
	}
	return t.mutate(op, k, func(r *Row, now time.Time) error {
		if !r.State.Active() {
			return illegal(op, r, "")
		}
		r.State, r.Reason, r.EndedAt, r.Repush = StateExpired, reason, now, false
		return nil
	})
}

// Settle applies a delivery receipt (state delivered or later) from host for message msgID:
// the envelope row (msgID, host) ends done. It returns the row and the state it was in.
//
//   - pending or relay-accepted → done.
//   - done → unchanged (receipts repeat: delivered, then notified, read, acked); no write.
//   - expired, unconfirmed or rejected → done: the mail arrived after all, later than we
//     thought. The caller may tell the sender, since an alert already went out.
//
// A receipt row (item id "receipt:…") cannot be settled (TransitionError).
func (t *Tx) Settle(msgID, host string) (Row, State, error) {
	const op = "settle"
	k := Key{ItemID: msgID, Host: host}
	opk := op + " " + k.String()
	if err := t.writable(opk); err != nil {
		return Row{}, 0, err
	}
	if err := checkKey(k); err != nil {
		return Row{}, 0, fmt.Errorf("outbox: %s: %w", opk, err)
	}
	old, err := t.getRow(rowKey(k))
	if err != nil {
		return Row{}, 0, fmt.Errorf("outbox: %s: %w", opk, err)
	}
	if old.Kind == KindReceipt {
		return Row{}, 0, illegal(op, &old, "receipt rows end when the relay or the peer accepts them")
	}
	if old.State == StateDone {
		return old, StateDone, nil
	}
	r, err := t.mutate(op, k, func(r *Row, now time.Time) error {
		r.State, r.EndedAt, r.Repush = StateDone, now, false
		r.LastError, r.Reason = "", ""
		return nil
	})
	if err != nil {
		return Row{}, 0, err
	}
	return r, old.State, nil
}

// Sweep ends the active rows whose deadline has passed, at most limit of them (limit ≤ 0: all),
// and returns them so the caller can alert their senders (Alert):
//
//   - pending, created more than the LAN deadline (72 h) ago → expired;
//   - relay-accepted with no delivery receipt by accepted_at + retention + 24 h → unconfirmed.
//
// It walks the deadline index only: O(rows whose deadline passed).
func (t *Tx) Sweep(limit int) ([]Row, error) {
	if err := t.writable("sweep"); err != nil {
		return nil, err
	}
	now := t.now()
	last := timeBits(now)
	var rks [][]byte
	c := t.b.deadline.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 9 {
			return nil, fmt.Errorf("outbox: sweep: %w: deadline index key %x", ErrCorrupt, k)
		}
		if binary.BigEndian.Uint64(k) > last || (limit > 0 && len(rks) >= limit) {
			break
		}
		rks = append(rks, bytes.Clone(k[8:]))
	}
	olds, err := t.loadRows(rks, "deadline")
	if err != nil {
		return nil, fmt.Errorf("outbox: sweep: %w", err)
	}
	for _, old := range olds {
		if !old.State.Active() {
			return nil, fmt.Errorf("outbox: sweep: %w: %s in the deadline index is %s", ErrCorrupt, old.Key(), old.State)
		}
	}
	out := make([]Row, 0, len(olds))
	for _, old := range olds {
		r := old
		if r.State == StatePending {
			r.State = StateExpired
			r.Reason = "not delivered within " + fmtDur(t.s.lanDeadline)
		} else {
			r.State = StateUnconfirmed
			r.Reason = fmt.Sprintf("no delivery receipt by %s (relay %s accepted it at %s)",
				r.Deadline.Format(isoLayout), r.Relay, r.AcceptedAt.Format(isoLayout))
		}
		r.EndedAt, r.UpdatedAt, r.Repush = now, now, false
		if err := t.put(&old, &r); err != nil {
			return nil, fmt.Errorf("outbox: sweep: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// loadRows reads the rows named by rks. It fails with ErrCorrupt when one is missing: callers
// load everything before they write anything.
func (t *Tx) loadRows(rks [][]byte, index string) ([]Row, error) {
	out := make([]Row, 0, len(rks))
	for _, rk := range rks {
		r, err := t.getRow(rk)
		if err != nil {
			return nil, fmt.Errorf("%w: %s index names a missing or bad row %q (%v)", ErrCorrupt, index, rk, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// scanPrefix returns copies of the keys of b that start with prefix, and their values.
func scanPrefix(b *bbolt.Bucket, prefix []byte) (keys, vals [][]byte, plen int) {
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		keys = append(keys, bytes.Clone(k))
		vals = append(vals, bytes.Clone(v))
	}
	return keys, vals, len(prefix)
}

// stripPrefix turns scanPrefix's index keys into row keys.
func stripPrefix(keys, _ [][]byte, plen int) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = k[plen:]
	}
	return out
}

// MakeDue makes every due-tracked row for host due now (next_at = now) — for when a verified
// inbound hop shows the host is up again. Attempts and backoff counters are kept. It walks the
// host index only (the host's active rows) and returns how many rows it moved.
func (t *Tx) MakeDue(host string) (int, error) {
	op := "make due " + host
	if err := t.writable(op); err != nil {
		return 0, err
	}
	if !validHost(host) {
		return 0, fmt.Errorf("outbox: %s: %w: host %q is not a host name", op, ErrInvalid, host)
	}
	now := t.now()
	last := timeBits(now)
	prefix := prefixOf(host)
	keys, vals, _ := scanPrefix(t.b.host, prefix)
	var rks [][]byte
	for i, k := range keys {
		if len(vals[i]) == 8 && binary.BigEndian.Uint64(vals[i]) > last {
			rks = append(rks, k[len(prefix):]) // due-tracked and not yet due
		}
	}
	olds, err := t.loadRows(rks, "host")
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	for _, old := range olds {
		r := old
		r.NextAt, r.UpdatedAt = now, now
		if err := t.put(&old, &r); err != nil {
			return 0, fmt.Errorf("outbox: %s: %w", op, err)
		}
	}
	return len(olds), nil
}

// RetryNow makes rows that wait in backoff due now (next_at = now), for `agentmbx outbox retry`:
// with id "" every waiting row (a walk of the due index past now), otherwise the rows of item id
// (an envelope's id is its message id) and the receipt rows of message id. Only due-tracked rows
// move (pending ones, and relay-accepted ones flagged for a re-push); attempts and backoff counters
// are kept. It returns how many rows it moved and how many due-tracked rows id named (those
// already due included), so a caller can tell an unknown or finished message from one that was
// already due.
func (t *Tx) RetryNow(id string) (moved, matched int, err error) {
	op := "retry " + id
	if err := t.writable(op); err != nil {
		return 0, 0, err
	}
	now := t.now()
	var rks [][]byte
	if id == "" {
		rks, matched = t.waitingRows(now)
	} else {
		if err := checkText("item id", id, MaxItemID, false); err != nil {
			return 0, 0, fmt.Errorf("outbox: %s: %w", op, err)
		}
		rks, matched, err = t.itemRows(id, now)
		if err != nil {
			return 0, 0, fmt.Errorf("outbox: %s: %w", op, err)
		}
	}
	olds, err := t.loadRows(rks, "due")
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	for _, old := range olds {
		r := old
		r.NextAt, r.UpdatedAt = now, now
		if err := t.put(&old, &r); err != nil {
			return 0, 0, fmt.Errorf("outbox: %s: %w", op, err)
		}
	}
	return len(olds), matched, nil
}

// waitingRows returns the keys of the due-tracked rows whose next_at is after now, and how many
// due-tracked rows there are.
func (t *Tx) waitingRows(now time.Time) (rks [][]byte, all int) {
	last := timeBits(now)
	c := t.b.due.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		all++
		if len(k) > 8 && binary.BigEndian.Uint64(k) > last {
			rks = append(rks, bytes.Clone(k[8:]))
		}
	}
	return rks, all
}

// itemRows returns the keys of id's due-tracked rows (item id = id, or a receipt of message id)
// whose next_at is after now, and how many of its rows are due-tracked.
func (t *Tx) itemRows(id string, now time.Time) (rks [][]byte, matched int, err error) {
	c := t.b.rows.Cursor()
	for _, prefix := range [][]byte{prefixOf(id), []byte(receiptPrefix + id + ":")} {
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			r, err := decodeRow(v)
			if err != nil {
				return nil, 0, err
			}
			if !r.due() {
				continue
			}
			matched++
			if r.NextAt.After(now) {
				rks = append(rks, bytes.Clone(k))
			}
		}
	}
	return rks, matched, nil
}

// FlushFilter selects the rows Flush makes due.
type FlushFilter struct {
	// Host keeps only the rows for this host ("" = every host).
	Host string
	// Transport keeps only the rows whose last attempt went over this transport (TransportNone
	// = any).
	Transport Transport
	// Limit moves at most this many rows (≤ 0: no limit), those due soonest first.
	Limit int
}

// Flush makes rows that wait in backoff due now (next_at = now), for when a link answers again:
// a peer's LAN delivery succeeded (Host), or the relay answered (Transport relay). Attempts and
// backoff counters are kept. It walks the host index for a host (O(its active rows)), else the
// due index from now on (O(waiting rows)), and returns how many rows it moved; a caller that got
// Limit may call again for the next burst.
func (t *Tx) Flush(f FlushFilter) (int, error) {
	op := "flush"
	if err := t.writable(op); err != nil {
		return 0, err
	}
	if f.Host != "" && !validHost(f.Host) {
		return 0, fmt.Errorf("outbox: %s: %w: host %q is not a host name", op, ErrInvalid, f.Host)
	}
	now := t.now()
	rks := t.waitingKeys(now, f.Host)
	var olds []Row
	for _, rk := range rks {
		if f.Limit > 0 && len(olds) >= f.Limit {
			break
		}
		r, err := t.getRow(rk)
		if err != nil {
			return 0, fmt.Errorf("outbox: %s: %w: index names a missing or bad row %q (%v)", op, ErrCorrupt, rk, err)
		}
		if f.Transport == TransportNone || r.Transport == f.Transport {
			olds = append(olds, r)
		}
	}
	for _, old := range olds {
		r := old
		r.NextAt, r.UpdatedAt = now, now
		if err := t.put(&old, &r); err != nil {
			return 0, fmt.Errorf("outbox: %s: %w", op, err)
		}
	}
	return len(olds), nil
}

// waitingKeys returns the row keys of the due-tracked rows (of host, or all with "") whose next_at
// is after now, in next_at order.
func (t *Tx) waitingKeys(now time.Time, host string) [][]byte {
	last := timeBits(now)
	if host == "" {
		var out [][]byte
		c := t.b.due.Cursor()
		for k, _ := c.Seek(binary.BigEndian.AppendUint64(nil, last+1)); k != nil; k, _ = c.Next() {
			if len(k) > 8 {
				out = append(out, bytes.Clone(k[8:]))
			}
		}
		return out
	}
	type waiting struct {
		at uint64
		rk []byte
	}
	var ws []waiting
	prefix := prefixOf(host)
	keys, vals, _ := scanPrefix(t.b.host, prefix)
	for i, k := range keys {
		if len(vals[i]) == 8 {
			if at := binary.BigEndian.Uint64(vals[i]); at > last {
				ws = append(ws, waiting{at, k[len(prefix):]})
			}
		}
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].at < ws[j].at })
	out := make([][]byte, len(ws))
	for i, w := range ws {
		out[i] = w.rk
	}
	return out
}

// RepushRelay flags for a re-push every relay-accepted row at relay whose acceptance was not
// under epoch (epoch "" flags them all), for when the relay shows a new epoch: its store may have
// lost what it accepted. A flagged row stays relay-accepted — it is never sent over the LAN, its
// deadline stands, its delivery receipt still settles it — but enters the due index (next_at =
// now), so the next pass pushes its stored wire bytes to the relay again. The push's accept
// statement (MarkRelayAccepted) clears the flag; failures back off like pending rows. Rows already
// flagged are left as they are. It returns how many rows it flagged; O(the relay's accepted rows).
func (t *Tx) RepushRelay(relay, epoch string) (int, error) {
	op := "repush " + relay
	if err := t.writable(op); err != nil {
		return 0, err
	}
	if err := checkText("relay", relay, MaxText, false); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	now := t.now()
	n, err := t.change(t.b.relay, relay, "relay", func(r *Row) bool {
		if r.Repush || (epoch != "" && r.Epoch == epoch) {
			return false
		}
		r.Repush, r.NextAt, r.UpdatedAt = true, now, now
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	return n, nil
}

// change applies edit to every row of index b under key (a relay or a host) and stores each row
// edit changed (it returns false to leave a row as it is). It returns how many rows changed.
func (t *Tx) change(b *bbolt.Bucket, key, index string, edit func(*Row) bool) (int, error) {
	olds, err := t.loadRows(stripPrefix(scanPrefix(b, prefixOf(key))), index)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, old := range olds {
		r := old
		if !edit(&r) {
			continue
		}
		if err := t.put(&old, &r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// RelayAccepted returns the relay-accepted rows at relay (without wire bytes), in key order.
func (t *Tx) RelayAccepted(relay string) ([]Row, error) {
	op := "relay accepted " + relay
	if err := t.readable(op); err != nil {
		return nil, err
	}
	if err := checkText("relay", relay, MaxText, false); err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", op, err)
	}
	prefix := prefixOf(relay)
	out, err := t.loadRows(stripPrefix(scanPrefix(t.b.relay, prefix)), "relay")
	if err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", op, err)
	}
	return out, nil
}

// RebindHost sets the host key of every active row for host to hostKey (after the peer rotated
// its host key: relay pushes must address the new key). Ended rows keep the key they had. It
// returns how many rows changed; O(the host's active rows).
func (t *Tx) RebindHost(host, hostKey string) (int, error) {
	op := "rebind " + host
	if err := t.writable(op); err != nil {
		return 0, err
	}
	if !validHost(host) {
		return 0, fmt.Errorf("outbox: %s: %w: host %q is not a host name", op, ErrInvalid, host)
	}
	if !validHostKey(hostKey) {
		return 0, fmt.Errorf("outbox: %s: %w: host key is not a base64 Ed25519 public key", op, ErrInvalid)
	}
	now := t.now()
	n, err := t.change(t.b.host, host, "host", func(r *Row) bool {
		if r.HostKey == hostKey {
			return false
		}
		r.HostKey, r.UpdatedAt = hostKey, now
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", op, err)
	}
	return n, nil
}

// ByItem returns every row of one item (one per target host, in host order), without wire
// bytes. For an envelope the item id is the message id, so this is "where did message X go".
func (t *Tx) ByItem(itemID string) ([]Row, error) {
	op := "by item " + itemID
	if err := t.readable(op); err != nil {
		return nil, err
	}
	if err := checkText("item id", itemID, MaxItemID, false); err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", op, err)
	}
	prefix := prefixOf(itemID)
	var out []Row
	c := t.b.rows.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		r, err := decodeRow(v)
		if err != nil {
			return nil, fmt.Errorf("outbox: %s: %w", op, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Filter selects rows for List.
type Filter struct {
	// Active keeps only pending and relay-accepted rows; List then walks the host index instead
	// of every row.
	Active bool
	// Host keeps only rows for this host ("" = all hosts).
	Host string
	// Limit stops after this many rows (≤ 0: no limit).
	Limit int
}

// List returns rows without wire bytes, ordered by (created_at, item id, host): for
// `agentmbx outbox`. Without Active it reads every row, ended ones included.
func (t *Tx) List(f Filter) ([]Row, error) {
	if err := t.readable("list"); err != nil {
		return nil, err
	}
	if f.Host != "" && !validHost(f.Host) {
		return nil, fmt.Errorf("outbox: list: %w: host %q is not a host name", ErrInvalid, f.Host)
	}
	var out []Row
	if f.Active {
		var prefix []byte
		if f.Host != "" {
			prefix = prefixOf(f.Host)
		}
		c := t.b.host.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return nil, fmt.Errorf("outbox: list: %w: host index key %q", ErrCorrupt, k)
			}
			r, err := t.getRow(k[i+1:])
			if err != nil {
				return nil, fmt.Errorf("outbox: list: %w: host index names a missing row (%v)", ErrCorrupt, err)
			}
			out = append(out, r)
		}
	} else {
		err := t.b.rows.ForEach(func(k, v []byte) error {
			r, err := decodeRow(v)
			if err != nil {
				return err
			}
			if f.Host == "" || r.Host == f.Host {
				out = append(out, r)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("outbox: list: %w", err)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		if a.ItemID != b.ItemID {
			return a.ItemID < b.ItemID
		}
		return a.Host < b.Host
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// Prune deletes ended rows (done, expired, unconfirmed, rejected) that ended before before,
// with their wire bytes: at most limit of them (limit ≤ 0: all). Active rows are never pruned.
// It walks the ended index only and returns how many rows it deleted.
func (t *Tx) Prune(before time.Time, limit int) (int, error) {
	if err := t.writable("prune"); err != nil {
		return 0, err
	}
	if before.IsZero() {
		return 0, fmt.Errorf("outbox: prune: %w: zero time", ErrInvalid)
	}
	var rks [][]byte
	c := t.b.ended.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 9 {
			return 0, fmt.Errorf("outbox: prune: %w: ended index key %x", ErrCorrupt, k)
		}
		if !bitsTime(binary.BigEndian.Uint64(k)).Before(before) || (limit > 0 && len(rks) >= limit) {
			break
		}
		rks = append(rks, bytes.Clone(k[8:]))
	}
	olds, err := t.loadRows(rks, "ended")
	if err != nil {
		return 0, fmt.Errorf("outbox: prune: %w", err)
	}
	for i := range olds {
		if err := t.remove(&olds[i]); err != nil {
			return 0, fmt.Errorf("outbox: prune: %w", err)
		}
	}
	return len(olds), nil
}
