package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/quarantine"
)

// Bucket names. The package owns the top-level bucket "relay-positions": relay → position JSON,
// and its schema version under a key that cannot be a relay identifier.
var (
	bucketPositions = []byte("relay-positions")
	keySchema       = []byte("\x00schema")
)

const schemaVersion = 1

// Limits of the identifiers the package stores.
const (
	MaxRelayLen = quarantine.MaxRelayLen // the caller's identifier of a relay (normally its URL)
	MaxEpochLen = quarantine.MaxEpochLen // a relay epoch
)

// ResetReason says why a receive position went back to 0. The zero value means no reset.
type ResetReason uint8

// Reasons of a reset (docs/design.md: Receive checkpoint and ack, Epochs, restarts and restores,
// Host key rotation).
const (
	// ResetEpochChanged: the relay answered another epoch (a restore, an explicit reset).
	ResetEpochChanged ResetReason = iota + 1
	// ResetRewound: in the same epoch the relay's head_seq is below received_through: the store
	// went back in time without rotating its epoch.
	ResetRewound
	// ResetBadAck: the relay refused an ack beyond its head (BAD_ACK): the same, seen at ack time.
	ResetBadAck
	// ResetRotated: this host rotated its key, and the relay re-sequenced its queue.
	ResetRotated
	// ResetRequested: the owner or the host asked for it.
	ResetRequested
)

var resetNames = [...]string{
	ResetEpochChanged: "epoch-changed",
	ResetRewound:      "rewound",
	ResetBadAck:       "bad-ack",
	ResetRotated:      "rotated",
	ResetRequested:    "requested",
}

// String returns the reason's wire name ("epoch-changed", …), "none" for the zero value.
func (r ResetReason) String() string {
	if r == 0 {
		return "none"
	}
	if r.Valid() {
		return resetNames[r]
	}
	return fmt.Sprintf("ResetReason(%d)", uint8(r))
}

// Valid reports whether r is one of the defined reasons (not the zero value).
func (r ResetReason) Valid() bool { return r >= ResetEpochChanged && r <= ResetRequested }

// MarshalText implements encoding.TextMarshaler.
func (r ResetReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *ResetReason) UnmarshalText(b []byte) error {
	if string(b) == "none" {
		*r = 0
		return nil
	}
	for i, n := range resetNames {
		if n != "" && n == string(b) {
			*r = ResetReason(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown reset reason %q", ErrInvalid, b)
}

// Position is how far this host has received from one relay.
type Position struct {
	Relay string `json:"relay"`
	// Epoch is the relay store generation the position belongs to ("" before the first pull).
	Epoch string `json:"epoch"`
	// ReceivedThrough is the highest seq durably processed, contiguously from the start of the
	// epoch (0: nothing yet). The next pull asks for items after it.
	ReceivedThrough int64 `json:"received_through"`
	// UpdatedAt is when the position last changed.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Resets counts resets; LastReset describes the latest.
	Resets    int        `json:"resets,omitempty"`
	LastReset *ResetInfo `json:"last_reset,omitempty"`
}

// ResetInfo describes one reset.
type ResetInfo struct {
	Reason ResetReason `json:"reason"`
	At     time.Time   `json:"at"`
	// FromEpoch and FromThrough are the position before the reset.
	FromEpoch   string `json:"from_epoch"`
	FromThrough int64  `json:"from_through"`
}

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// Logger receives resets (Warn) and quarantined items (Warn). Default: slog.Default().
	Logger *slog.Logger
}

// Store keeps the receive positions inside a bbolt database the caller opened and owns, and
// writes rejected items to the quarantine in the same database. It holds no mutable state and is
// safe for concurrent use.
type Store struct {
	db     *bbolt.DB
	q      *quarantine.Store
	clock  func() time.Time
	logger *slog.Logger
}

// Open creates the positions bucket in db when it is missing and returns the Store. q must be a
// quarantine in the same database. db stays the caller's.
func Open(db *bbolt.DB, q *quarantine.Store, opts *Options) (*Store, error) {
	if db == nil || q == nil {
		return nil, fmt.Errorf("checkpoint: open: %w: nil database or quarantine", ErrInvalid)
	}
	if q.DB() != db {
		return nil, fmt.Errorf("checkpoint: open: %w: the quarantine lives in another database", ErrInvalid)
	}
	s := &Store{db: db, q: q, clock: time.Now, logger: slog.Default()}
	if opts != nil {
		if opts.Clock != nil {
			s.clock = opts.Clock
		}
		if opts.Logger != nil {
			s.logger = opts.Logger
		}
	}
	var err error
	if db.IsReadOnly() {
		err = db.View(func(tx *bbolt.Tx) error { _, err := bucket(tx); return err })
	} else {
		err = db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bucketPositions)
			if err != nil {
				return err
			}
			if v := b.Get(keySchema); v == nil {
				return b.Put(keySchema, binary.BigEndian.AppendUint64(nil, schemaVersion))
			}
			_, err = bucket(tx)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open: %w", err)
	}
	return s, nil
}

func bucket(tx *bbolt.Tx) (*bbolt.Bucket, error) {
	b := tx.Bucket(bucketPositions)
	if b == nil {
		return nil, ErrNoBuckets
	}
	v := b.Get(keySchema)
	if len(v) != 8 {
		return nil, fmt.Errorf("%w: schema version missing", ErrCorrupt)
	}
	if binary.BigEndian.Uint64(v) > schemaVersion {
		return nil, ErrSchema
	}
	return b, nil
}

// DB returns the database the Store lives in.
func (s *Store) DB() *bbolt.DB { return s.db }

// Quarantine returns the quarantine the Store writes rejected items to.
func (s *Store) Quarantine() *quarantine.Store { return s.q }

// In returns the positions as seen by tx.
func (s *Store) In(tx *bbolt.Tx) *Tx { return &Tx{tx: tx, clock: s.clock} }

// Position reads the position of relay in a transaction of its own (see Tx.Position).
func (s *Store) Position(ctx context.Context, relay string) (Position, error) {
	if err := ctx.Err(); err != nil {
		return Position{}, err
	}
	var p Position
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		p, err = s.In(tx).Position(relay)
		return err
	})
	return p, err
}

// Positions reads every relay's position in a transaction of its own.
func (s *Store) Positions(ctx context.Context) ([]Position, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ps []Position
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		ps, err = s.In(tx).Positions()
		return err
	})
	return ps, err
}

// Reset resets relay's position in a transaction of its own (see Tx.Reset) and logs it.
func (s *Store) Reset(ctx context.Context, relay, epoch string, why ResetReason) (Position, bool, error) {
	if err := ctx.Err(); err != nil {
		return Position{}, false, err
	}
	var p Position
	var changed bool
	err := s.db.Update(func(tx *bbolt.Tx) error {
		var err error
		p, changed, err = s.In(tx).Reset(relay, epoch, why)
		return err
	})
	if err == nil && changed {
		s.logReset(p)
	}
	return p, changed, err
}

func (s *Store) logReset(p Position) {
	if p.LastReset == nil {
		return
	}
	s.logger.Warn("relay receive position reset", logkey.Relay, p.Relay, logkey.Reason, p.LastReset.Reason.String(),
		logkey.FromEpoch, p.LastReset.FromEpoch, logkey.FromThrough, p.LastReset.FromThrough, logkey.Epoch, p.Epoch)
}

// Tx is the positions inside one bbolt transaction.
type Tx struct {
	tx    *bbolt.Tx
	clock func() time.Time
}

func checkRelay(relay string) error {
	if relay == "" || len(relay) > MaxRelayLen || relay[0] == 0 {
		return fmt.Errorf("%w: relay must be 1..%d bytes", ErrInvalid, MaxRelayLen)
	}
	return nil
}

func checkEpoch(epoch string) error {
	if epoch == "" || len(epoch) > MaxEpochLen {
		return fmt.Errorf("%w: epoch must be 1..%d bytes", ErrInvalid, MaxEpochLen)
	}
	return nil
}

// Position returns the position of relay; a relay never pulled from has the zero position
// (epoch "", received_through 0).
func (t *Tx) Position(relay string) (Position, error) {
	if err := checkRelay(relay); err != nil {
		return Position{}, fmt.Errorf("checkpoint: position: %w", err)
	}
	b, err := bucket(t.tx)
	if err != nil {
		return Position{}, fmt.Errorf("checkpoint: position: %w", err)
	}
	return decodePosition(relay, b.Get([]byte(relay)))
}

func decodePosition(relay string, v []byte) (Position, error) {
	p := Position{Relay: relay}
	if v == nil {
		return p, nil
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return Position{}, fmt.Errorf("checkpoint: position of %s: %w: %v", relay, ErrCorrupt, err)
	}
	if p.ReceivedThrough < 0 || (p.Epoch == "" && p.ReceivedThrough != 0) {
		return Position{}, fmt.Errorf("checkpoint: position of %s: %w: epoch %q through %d", relay, ErrCorrupt, p.Epoch, p.ReceivedThrough)
	}
	p.Relay = relay
	return p, nil
}

// Positions returns every relay's position, ordered by relay.
func (t *Tx) Positions() ([]Position, error) {
	b, err := bucket(t.tx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: positions: %w", err)
	}
	out := []Position{}
	err = b.ForEach(func(k, v []byte) error {
		if len(k) > 0 && k[0] == 0 {
			return nil // package keys
		}
		p, err := decodePosition(string(k), v)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (t *Tx) put(p Position) error {
	if !t.tx.Writable() {
		return ErrReadOnly
	}
	b, err := bucket(t.tx)
	if err != nil {
		return err
	}
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return b.Put([]byte(p.Relay), v)
}

// Reset moves relay's position to (epoch, 0) because of why, so the next pull starts from the
// beginning of that epoch. epoch "" keeps the current epoch. Resetting a position that already is
// (epoch, 0) changes nothing and reports changed = false. Callers that see a reset with changed =
// true also re-push their relay-accepted rows (docs/design.md: Epochs, restarts and restores).
func (t *Tx) Reset(relay, epoch string, why ResetReason) (p Position, changed bool, err error) {
	if err := checkRelay(relay); err != nil {
		return Position{}, false, fmt.Errorf("checkpoint: reset: %w", err)
	}
	if !why.Valid() {
		return Position{}, false, fmt.Errorf("checkpoint: reset %s: %w: reason %d", relay, ErrInvalid, uint8(why))
	}
	if epoch != "" {
		if err := checkEpoch(epoch); err != nil {
			return Position{}, false, fmt.Errorf("checkpoint: reset %s: %w", relay, err)
		}
	}
	if !t.tx.Writable() {
		return Position{}, false, fmt.Errorf("checkpoint: reset %s: %w", relay, ErrReadOnly)
	}
	p, err = t.Position(relay)
	if err != nil {
		return Position{}, false, err
	}
	if epoch == "" {
		epoch = p.Epoch
	}
	if p.Epoch == epoch && p.ReceivedThrough == 0 {
		return p, false, nil
	}
	p = p.reset(epoch, why, t.clock())
	if err := t.put(p); err != nil {
		return Position{}, false, fmt.Errorf("checkpoint: reset %s: %w", relay, err)
	}
	return p, true, nil
}

func (p Position) reset(epoch string, why ResetReason, now time.Time) Position {
	now = now.UTC()
	p.LastReset = &ResetInfo{Reason: why, At: now, FromEpoch: p.Epoch, FromThrough: p.ReceivedThrough}
	p.Resets++
	p.Epoch, p.ReceivedThrough, p.UpdatedAt = epoch, 0, now
	return p
}
