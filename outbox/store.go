package outbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/bbolt"
)

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Clock returns the current time (default time.Now). Every operation reads it once; tests
	// inject a fake clock instead of sleeping.
	Clock func() time.Time
	// LANDeadline is how long a pending row may stay undelivered (default 72 h).
	LANDeadline time.Duration
	// Grace is added to the relay retention for a relay-accepted row's deadline (default 24 h).
	Grace time.Duration
	// Jitter returns a uniform draw in [0, 1) that spreads each persisted backoff by
	// ±JitterSpread (default math/rand/v2's Float64). Tests inject a fixed or seeded source;
	// func() float64 { return 0.5 } turns jitter off.
	Jitter func() float64
}

// Store is the outbox inside a bbolt database that the caller opened and owns (the host keeps
// all its state in one file). A Store holds no mutable state: it is safe for concurrent use, and
// any number of goroutines may call it; bbolt serializes the writers.
type Store struct {
	db          *bbolt.DB
	clock       func() time.Time
	lanDeadline time.Duration
	grace       time.Duration
	jitter      func() float64
}

// Open creates the outbox buckets in db if they are missing and returns the Store. It refuses
// a store written by a newer schema (ErrSchema). db stays the caller's: Store never closes it.
func Open(db *bbolt.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("outbox: open: %w: nil database", ErrInvalid)
	}
	s := &Store{db: db, clock: time.Now, lanDeadline: DefaultLANDeadline, grace: DefaultGrace, jitter: rand.Float64}
	if opts != nil {
		if opts.Clock != nil {
			s.clock = opts.Clock
		}
		if opts.Jitter != nil {
			s.jitter = opts.Jitter
		}
		if opts.LANDeadline < 0 || opts.Grace < 0 {
			return nil, fmt.Errorf("outbox: open: %w: negative deadline", ErrInvalid)
		}
		if opts.LANDeadline > 0 {
			s.lanDeadline = opts.LANDeadline
		}
		if opts.Grace > 0 {
			s.grace = opts.Grace
		}
	}
	if db.IsReadOnly() {
		if err := db.View(func(tx *bbolt.Tx) error { _, err := openBuckets(tx); return err }); err != nil {
			return nil, fmt.Errorf("outbox: open: %w", err)
		}
		return s, nil
	}
	if err := db.Update(createBuckets); err != nil {
		return nil, fmt.Errorf("outbox: open: %w", err)
	}
	return s, nil
}

// DB returns the database the Store lives in.
func (s *Store) DB() *bbolt.DB { return s.db }

// Update runs fn in a read-write transaction of its own and commits (fsync) when fn returns nil.
// ctx is checked before the transaction starts; a bbolt commit cannot be interrupted.
func (s *Store) Update(ctx context.Context, fn func(*Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error { return fn(s.In(tx)) })
}

// Batch is Update through bbolt's DB.Batch: concurrent callers share one transaction and one
// fsync, and each still returns only after the commit that holds its work. fn may be called more
// than once (bbolt re-runs the others when one call in a batch fails), so it must have no side
// effects outside the transaction.
func (s *Store) Batch(ctx context.Context, fn func(*Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Batch(func(tx *bbolt.Tx) error { return fn(s.In(tx)) })
}

// View runs fn in a read-only transaction.
func (s *Store) View(ctx context.Context, fn func(*Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(tx *bbolt.Tx) error { return fn(s.In(tx)) })
}

func update[T any](ctx context.Context, s *Store, fn func(*Tx) (T, error)) (T, error) {
	return inTx(ctx, s.Update, fn)
}

func view[T any](ctx context.Context, s *Store, fn func(*Tx) (T, error)) (T, error) {
	return inTx(ctx, s.View, fn)
}

// inTx runs fn in a transaction of run (Store.Update or Store.View) and returns its result.
func inTx[T any](ctx context.Context, run func(context.Context, func(*Tx) error) error, fn func(*Tx) (T, error)) (T, error) {
	var out T
	err := run(ctx, func(t *Tx) error {
		var err error
		out, err = fn(t)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// The methods below each run one Tx operation in a transaction of their own; the Tx methods of
// the same name document them. Use Store.In inside your own transaction when the outbox change
// must commit together with other state.

// Add creates rows in one transaction through Batch (concurrent senders share an fsync). It is
// all or nothing: if one row is refused, none is stored. Each returned Row has been committed.
// A lone caller waits up to the database's MaxBatchDelay (bbolt's default 10 ms) for company;
// use Update with Tx.Add where that latency matters more than throughput.
func (s *Store) Add(ctx context.Context, rows ...NewRow) ([]Row, error) {
	var out []Row
	err := s.Batch(ctx, func(t *Tx) error {
		out = out[:0]
		for _, n := range rows {
			r, err := t.Add(n)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Get reads one row with its wire bytes.
func (s *Store) Get(ctx context.Context, k Key) (Row, error) {
	return view(ctx, s, func(t *Tx) (Row, error) { return t.Get(k) })
}

// Due returns the rows due now (see Tx.Due).
func (s *Store) Due(ctx context.Context, limit int) ([]Row, error) {
	return view(ctx, s, func(t *Tx) ([]Row, error) { return t.Due(limit) })
}

// DueWith returns the rows due now within the bounds of f (see Tx.DueWith).
func (s *Store) DueWith(ctx context.Context, f DueFilter) ([]Row, error) {
	return view(ctx, s, func(t *Tx) ([]Row, error) { return t.DueWith(f) })
}

// NextDue returns the earliest next_at (see Tx.NextDue).
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	type res struct {
		t  time.Time
		ok bool
	}
	r, err := view(ctx, s, func(t *Tx) (res, error) {
		at, ok, err := t.NextDue()
		return res{at, ok}, err
	})
	return r.t, r.ok, err
}

// Claim returns the due rows and leases them (see Tx.Claim).
func (s *Store) Claim(ctx context.Context, limit int, lease time.Duration) ([]Row, error) {
	return update(ctx, s, func(t *Tx) ([]Row, error) { return t.Claim(limit, lease) })
}

// MarkDelivered ends a pending row done after a LAN delivery (see Tx.MarkDelivered).
func (s *Store) MarkDelivered(ctx context.Context, k Key) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkDelivered(k) })
}

// MarkAttemptFailed records a failed attempt (see Tx.MarkAttemptFailed).
func (s *Store) MarkAttemptFailed(ctx context.Context, k Key, tr Transport, cause error) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkAttemptFailed(k, tr, cause) })
}

// MarkRejected records a rejection (see Tx.MarkRejected).
func (s *Store) MarkRejected(ctx context.Context, k Key, tr Transport, reason string, retryable bool) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkRejected(k, tr, reason, retryable) })
}

// MarkRelayAccepted records a verified relay acceptance (see Tx.MarkRelayAccepted).
func (s *Store) MarkRelayAccepted(ctx context.Context, k Key, a Acceptance) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkRelayAccepted(k, a) })
}

// MarkLANUnsigned records a LAN peer's unsigned "stored" (see Tx.MarkLANUnsigned).
func (s *Store) MarkLANUnsigned(ctx context.Context, k Key) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkLANUnsigned(k) })
}

// MarkRelaySentV1 records a v1 relay's unsigned "stored" (see Tx.MarkRelaySentV1).
func (s *Store) MarkRelaySentV1(ctx context.Context, k Key, relay string) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkRelaySentV1(k, relay) })
}

// MarkExpired ends an active row expired (see Tx.MarkExpired).
func (s *Store) MarkExpired(ctx context.Context, k Key, reason string) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.MarkExpired(k, reason) })
}

// Settle applies a delivery receipt (see Tx.Settle).
func (s *Store) Settle(ctx context.Context, msgID, host string) (Row, State, error) {
	type res struct {
		r    Row
		from State
	}
	r, err := update(ctx, s, func(t *Tx) (res, error) {
		row, from, err := t.Settle(msgID, host)
		return res{row, from}, err
	})
	return r.r, r.from, err
}

// Sweep ends the rows whose deadline passed (see Tx.Sweep).
func (s *Store) Sweep(ctx context.Context, limit int) ([]Row, error) {
	return update(ctx, s, func(t *Tx) ([]Row, error) { return t.Sweep(limit) })
}

// MakeDue makes a host's rows due now (see Tx.MakeDue).
func (s *Store) MakeDue(ctx context.Context, host string) (int, error) {
	return update(ctx, s, func(t *Tx) (int, error) { return t.MakeDue(host) })
}

// RepushRelay flags a relay's accepted rows for a re-push (see Tx.RepushRelay).
func (s *Store) RepushRelay(ctx context.Context, relay, epoch string) (int, error) {
	return update(ctx, s, func(t *Tx) (int, error) { return t.RepushRelay(relay, epoch) })
}

// RelayAccepted lists a relay's accepted rows (see Tx.RelayAccepted).
func (s *Store) RelayAccepted(ctx context.Context, relay string) ([]Row, error) {
	return view(ctx, s, func(t *Tx) ([]Row, error) { return t.RelayAccepted(relay) })
}

// RebindHost gives a host's active rows a new host key (see Tx.RebindHost).
func (s *Store) RebindHost(ctx context.Context, host, hostKey string) (int, error) {
	return update(ctx, s, func(t *Tx) (int, error) { return t.RebindHost(host, hostKey) })
}

// ByItem lists the rows of one item (see Tx.ByItem).
func (s *Store) ByItem(ctx context.Context, itemID string) ([]Row, error) {
	return view(ctx, s, func(t *Tx) ([]Row, error) { return t.ByItem(itemID) })
}

// List lists rows (see Tx.List).
func (s *Store) List(ctx context.Context, f Filter) ([]Row, error) {
	return view(ctx, s, func(t *Tx) ([]Row, error) { return t.List(f) })
}

// Prune deletes ended rows (see Tx.Prune).
func (s *Store) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	return update(ctx, s, func(t *Tx) (int, error) { return t.Prune(before, limit) })
}

// Check verifies the indexes against the rows (see Tx.Check).
func (s *Store) Check(ctx context.Context) error {
	return s.View(ctx, func(t *Tx) error { return t.Check() })
}

// RetryNow runs Tx.RetryNow in a transaction of its own.
func (s *Store) RetryNow(ctx context.Context, id string) (moved, matched int, err error) {
	err = s.Update(ctx, func(t *Tx) error {
		moved, matched, err = t.RetryNow(id)
		return err
	})
	return moved, matched, err
}

// Flush makes waiting rows due now (see Tx.Flush).
func (s *Store) Flush(ctx context.Context, f FlushFilter) (int, error) {
	return update(ctx, s, func(t *Tx) (int, error) { return t.Flush(f) })
}
