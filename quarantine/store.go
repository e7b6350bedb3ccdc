package quarantine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/bbolt"
)

// Bucket names. The package owns the top-level bucket "quarantine" and everything inside it.
var (
	bucketRoot     = []byte("quarantine")
	bucketItems    = []byte("items")    // itemKey → record JSON
	bucketIDs      = []byte("ids")      // identity → itemKey
	bucketUnpaired = []byte("unpaired") // lp(sender) itemKey → empty
	keySchema      = []byte("schema")
)

// schemaVersion is the layout this package writes.
const schemaVersion = 1

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Clock returns the current time (default time.Now); Put reads it for an entry without At.
	Clock func() time.Time
}

// Store is the quarantine inside a bbolt database the caller opened and owns. It holds no mutable
// state and is safe for concurrent use.
type Store struct {
	db    *bbolt.DB
	clock func() time.Time
}

// Open creates the quarantine bucket in db when it is missing and returns the Store. It refuses a
// bucket written by a newer schema (ErrSchema). db stays the caller's: the Store never closes it.
func Open(db *bbolt.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("quarantine: open: %w: nil database", ErrInvalid)
	}
	s := &Store{db: db, clock: time.Now}
	if opts != nil && opts.Clock != nil {
		s.clock = opts.Clock
	}
	var err error
	if db.IsReadOnly() {
		err = db.View(func(tx *bbolt.Tx) error { _, err := buckets(tx); return err })
	} else {
		err = db.Update(createBuckets)
	}
	if err != nil {
		return nil, fmt.Errorf("quarantine: open: %w", err)
	}
	return s, nil
}

func createBuckets(tx *bbolt.Tx) error {
	root, err := tx.CreateBucketIfNotExists(bucketRoot)
	if err != nil {
		return err
	}
	if v := root.Get(keySchema); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%w: schema version of %d bytes", ErrCorrupt, len(v))
		}
		if binary.BigEndian.Uint64(v) > schemaVersion {
			return ErrSchema
		}
	} else if err := root.Put(keySchema, binary.BigEndian.AppendUint64(nil, schemaVersion)); err != nil {
		return err
	}
	for _, name := range [][]byte{bucketItems, bucketIDs, bucketUnpaired} {
		if _, err := root.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

type bkts struct{ items, ids, unpaired *bbolt.Bucket }

func buckets(tx *bbolt.Tx) (bkts, error) {
	root := tx.Bucket(bucketRoot)
	if root == nil {
		return bkts{}, ErrNoBuckets
	}
	b := bkts{root.Bucket(bucketItems), root.Bucket(bucketIDs), root.Bucket(bucketUnpaired)}
	if b.items == nil || b.ids == nil || b.unpaired == nil {
		return bkts{}, ErrNoBuckets
	}
	if v := root.Get(keySchema); len(v) == 8 && binary.BigEndian.Uint64(v) > schemaVersion {
		return bkts{}, ErrSchema
	}
	return b, nil
}

// DB returns the database the Store lives in.
func (s *Store) DB() *bbolt.DB { return s.db }

// In returns the quarantine as seen by tx, a transaction of the Store's database. Use it to commit
// a quarantine write together with other state.
func (s *Store) In(tx *bbolt.Tx) *Tx { return &Tx{tx: tx, clock: s.clock} }

// View runs fn in a read-only transaction.
func (s *Store) View(ctx context.Context, fn func(*Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(tx *bbolt.Tx) error { return fn(s.In(tx)) })
}

// Update runs fn in a read-write transaction of its own and commits when fn returns nil.
func (s *Store) Update(ctx context.Context, fn func(*Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error { return fn(s.In(tx)) })
}

// List lists entries in a read-only transaction of its own (see Tx.List).
func (s *Store) List(ctx context.Context, f Filter) ([]Entry, error) {
	var out []Entry
	err := s.View(ctx, func(t *Tx) error {
		var err error
		out, err = t.List(f)
		return err
	})
	return out, err
}

// Tx is the quarantine inside one bbolt transaction. It is valid only as long as that
// transaction is.
type Tx struct {
	tx    *bbolt.Tx
	clock func() time.Time
}

func (t *Tx) writable(op string) (bkts, error) {
	if !t.tx.Writable() {
		return bkts{}, fmt.Errorf("quarantine: %s: %w", op, ErrReadOnly)
	}
	b, err := buckets(t.tx)
	if err != nil {
		return bkts{}, fmt.Errorf("quarantine: %s: %w", op, err)
	}
	return b, nil
}

// Put quarantines e. It computes e's ID, WireHash and Bytes, and sets At from the clock when it is
// zero. When the same item (same relay, sender, item id and wire bytes) is already held, Put
// changes nothing and returns the held entry with added = false. e.Wire is copied; the caller may
// reuse it.
func (t *Tx) Put(e Entry) (held Entry, added bool, err error) {
	b, err := t.writable("put")
	if err != nil {
		return Entry{}, false, err
	}
	if err := e.check(t.clock()); err != nil {
		return Entry{}, false, fmt.Errorf("quarantine: put %s seq %d: %w", e.ItemID, e.Seq, err)
	}
	id, _ := parseID(e.ID)
	if k := b.ids.Get(id); k != nil {
		v := b.items.Get(k)
		if v == nil {
			return Entry{}, false, fmt.Errorf("quarantine: put: %w: id %x without an entry", ErrCorrupt, id)
		}
		old, err := decodeEntry(id, v, false)
		if err != nil {
			return Entry{}, false, fmt.Errorf("quarantine: put: %w", err)
		}
		return old, false, nil
	}
	key := itemKey(e.Relay, e.Epoch, e.Seq, id)
	val, err := json.Marshal(e.record())
	if err != nil {
		return Entry{}, false, fmt.Errorf("quarantine: put %s: %w", e.ItemID, err)
	}
	if err := b.items.Put(key, val); err != nil {
		return Entry{}, false, fmt.Errorf("quarantine: put %s: %w", e.ItemID, err)
	}
	if err := b.ids.Put(id, key); err != nil {
		return Entry{}, false, fmt.Errorf("quarantine: put %s: %w", e.ItemID, err)
	}
	if e.Cause == CauseUnpaired {
		if err := b.unpaired.Put(unpairedKey(e.Sender, key), nil); err != nil {
			return Entry{}, false, fmt.Errorf("quarantine: put %s: %w", e.ItemID, err)
		}
	}
	e.Wire = append([]byte(nil), e.Wire...)
	return e, true, nil
}

func unpairedKey(sender string, itemKey []byte) []byte {
	return append(appendLP(nil, sender), itemKey...)
}

// Get returns the entry with the given ID, with its wire bytes.
func (t *Tx) Get(id string) (Entry, error) {
	raw, err := parseID(id)
	if err != nil {
		return Entry{}, fmt.Errorf("quarantine: get: %w", err)
	}
	b, err := buckets(t.tx)
	if err != nil {
		return Entry{}, fmt.Errorf("quarantine: get: %w", err)
	}
	k := b.ids.Get(raw)
	if k == nil {
		return Entry{}, fmt.Errorf("quarantine: get %s: %w", id, ErrNotFound)
	}
	v := b.items.Get(k)
	if v == nil {
		return Entry{}, fmt.Errorf("quarantine: get %s: %w: id without an entry", id, ErrCorrupt)
	}
	e, err := decodeEntry(raw, v, true)
	if err != nil {
		return Entry{}, fmt.Errorf("quarantine: get: %w", err)
	}
	return e, nil
}

// Filter selects entries for List. The zero Filter lists everything.
type Filter struct {
	Relay  string // only this relay
	Sender string // only this sender key
	Cause  Cause  // only this cause (0: any)
	// Limit caps the number of entries returned (0: no cap).
	Limit int
	// WithWire includes the wire bytes (left out by default: a listing does not need them).
	WithWire bool
}

// List returns the entries f selects, ordered by relay, epoch and seq.
func (t *Tx) List(f Filter) ([]Entry, error) {
	b, err := buckets(t.tx)
	if err != nil {
		return nil, fmt.Errorf("quarantine: list: %w", err)
	}
	if f.Cause != 0 && !f.Cause.Valid() {
		return nil, fmt.Errorf("quarantine: list: %w: cause %d", ErrInvalid, uint8(f.Cause))
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("quarantine: list: %w: negative limit", ErrInvalid)
	}
	var prefix []byte
	if f.Relay != "" {
		if len(f.Relay) > MaxRelayLen {
			return nil, nil
		}
		prefix = appendLP(nil, f.Relay)
	}
	out := []Entry{}
	c := b.items.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		e, err := decodeEntry(idOfItemKey(k), v, f.WithWire)
		if err != nil {
			return nil, fmt.Errorf("quarantine: list: %w", err)
		}
		if (f.Sender != "" && e.Sender != f.Sender) || (f.Cause != 0 && e.Cause != f.Cause) {
			continue
		}
		out = append(out, e)
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out, nil
}

// Count returns the number of entries held.
func (t *Tx) Count() (int, error) {
	b, err := buckets(t.tx)
	if err != nil {
		return 0, fmt.Errorf("quarantine: count: %w", err)
	}
	return b.items.Stats().KeyN, nil
}

// Waiting returns, with their wire bytes, the entries held only because sender was not paired
// (CauseUnpaired), ordered by relay, epoch and seq.
func (t *Tx) Waiting(sender string) ([]Entry, error) {
	b, err := buckets(t.tx)
	if err != nil {
		return nil, fmt.Errorf("quarantine: waiting: %w", err)
	}
	keys, err := waitingKeys(b, sender)
	if err != nil {
		return nil, fmt.Errorf("quarantine: waiting: %w", err)
	}
	out := make([]Entry, 0, len(keys))
	for _, k := range keys {
		v := b.items.Get(k)
		if v == nil {
			return nil, fmt.Errorf("quarantine: waiting: %w: index names a missing entry", ErrCorrupt)
		}
		e, err := decodeEntry(idOfItemKey(k), v, true)
		if err != nil {
			return nil, fmt.Errorf("quarantine: waiting: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

func waitingKeys(b bkts, sender string) ([][]byte, error) {
	if sender == "" || len(sender) > maxUnpairedID {
		return nil, nil
	}
	prefix := appendLP(nil, sender)
	var keys [][]byte
	c := b.unpaired.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k[len(prefix):]...))
	}
	return keys, nil
}

// UnpairedSenders returns the distinct sender keys that have entries waiting for pairing, sorted.
// A host checks them against its peers at startup, in case a pairing happened while the release
// could not run.
func (t *Tx) UnpairedSenders() ([]string, error) {
	b, err := buckets(t.tx)
	if err != nil {
		return nil, fmt.Errorf("quarantine: unpaired senders: %w", err)
	}
	var out []string
	c := b.unpaired.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 2 || len(k) < 2+int(binary.BigEndian.Uint16(k)) {
			return nil, fmt.Errorf("quarantine: unpaired senders: %w: short index key", ErrCorrupt)
		}
		sender := string(k[2 : 2+int(binary.BigEndian.Uint16(k))])
		if len(out) == 0 || out[len(out)-1] != sender {
			out = append(out, sender)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Release removes the entries waiting for sender (CauseUnpaired) and returns them with their wire
// bytes, ordered by relay, epoch and seq, each with Releases incremented. The caller reprocesses
// them in the same transaction and puts back (Put) any it still refuses, so nothing is lost: if
// the transaction does not commit, the entries stay.
func (t *Tx) Release(sender string) ([]Entry, error) {
	b, err := t.writable("release")
	if err != nil {
		return nil, err
	}
	keys, err := waitingKeys(b, sender)
	if err != nil {
		return nil, fmt.Errorf("quarantine: release: %w", err)
	}
	out := make([]Entry, 0, len(keys))
	for _, k := range keys {
		e, err := t.remove(b, k)
		if err != nil {
			return nil, fmt.Errorf("quarantine: release %s: %w", sender, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// ReleaseID removes the entry with the given ID, whatever its cause, and returns it with its wire
// bytes and Releases incremented, for reprocessing in the same transaction (an owner's explicit
// retry). Put it back if it is refused again.
func (t *Tx) ReleaseID(id string) (Entry, error) {
	b, err := t.writable("release")
	if err != nil {
		return Entry{}, err
	}
	raw, err := parseID(id)
	if err != nil {
		return Entry{}, fmt.Errorf("quarantine: release: %w", err)
	}
	k := b.ids.Get(raw)
	if k == nil {
		return Entry{}, fmt.Errorf("quarantine: release %s: %w", id, ErrNotFound)
	}
	e, err := t.remove(b, append([]byte(nil), k...))
	if err != nil {
		return Entry{}, fmt.Errorf("quarantine: release %s: %w", id, err)
	}
	return e, nil
}

func (t *Tx) remove(b bkts, key []byte) (Entry, error) {
	id := idOfItemKey(key)
	v := b.items.Get(key)
	if v == nil {
		return Entry{}, fmt.Errorf("%w: index names a missing entry", ErrCorrupt)
	}
	e, err := decodeEntry(id, v, true)
	if err != nil {
		return Entry{}, err
	}
	if err := b.items.Delete(key); err != nil {
		return Entry{}, err
	}
	if err := b.ids.Delete(id); err != nil {
		return Entry{}, err
	}
	if e.Cause == CauseUnpaired {
		if err := b.unpaired.Delete(unpairedKey(e.Sender, key)); err != nil {
			return Entry{}, err
		}
	}
	e.Releases++
	return e, nil
}
