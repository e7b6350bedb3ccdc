package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// Host keys in items and dedup are keys.id, a small integer, instead of 44 characters each. A key
// row is never deleted or changed, so an id seen committed stays right for the life of the file
// and both sides cache the mapping.

// maxCachedKeys bounds each key cache; a full cache starts over.
const maxCachedKeys = 1 << 20

// writerKeys is the writer's cache of committed key ids.
type writerKeys struct{ ids map[string]int64 }

// keyID returns the id of pub. With create it adds a key row when there is none; without, an
// unknown key is id 0, which no row has. Only ids that were committed before this transaction are
// cached: a row this transaction added goes away if it rolls back (t.fresh remembers those).
func (t *tx) keyID(pub string, create bool) (int64, error) {
	if id, ok := t.keys.ids[pub]; ok {
		return id, nil
	}
	var id int64
	err := t.q.QueryRowContext(bg, "SELECT id FROM keys WHERE pubkey = ?", pub).Scan(&id)
	switch {
	case err == nil:
		if !t.fresh[pub] {
			if len(t.keys.ids) >= maxCachedKeys {
				clear(t.keys.ids)
			}
			t.keys.ids[pub] = id
		}
		return id, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("key id: %w", err)
	case !create:
		return 0, nil
	}
	if err := t.q.QueryRowContext(bg, "INSERT INTO keys(pubkey) VALUES(?) RETURNING id", pub).Scan(&id); err != nil {
		return 0, fmt.Errorf("key id: %w", err)
	}
	if t.fresh == nil {
		t.fresh = map[string]bool{}
	}
	t.fresh[pub] = true
	return id, nil
}

// readKeys is the readers' cache of key ids: readers see only committed rows.
type readKeys struct {
	mu   sync.Mutex
	ids  map[string]int64
	pubs map[int64]string
}

func newReadKeys() *readKeys { return &readKeys{ids: map[string]int64{}, pubs: map[int64]string{}} }

func (c *readKeys) remember(pub string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) >= maxCachedKeys {
		clear(c.ids)
		clear(c.pubs)
	}
	c.ids[pub], c.pubs[id] = id, pub
}

// id returns the id of pub, 0 when the store has never seen it.
func (c *readKeys) id(ctx context.Context, q querier, pub string) (int64, error) {
	c.mu.Lock()
	id, ok := c.ids[pub]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	err := q.QueryRowContext(ctx, "SELECT id FROM keys WHERE pubkey = ?", pub).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("key id: %w", err)
	}
	c.remember(pub, id)
	return id, nil
}

// pub returns the key of id.
func (c *readKeys) pub(ctx context.Context, q querier, id int64) (string, error) {
	c.mu.Lock()
	pub, ok := c.pubs[id]
	c.mu.Unlock()
	if ok {
		return pub, nil
	}
	if err := q.QueryRowContext(ctx, "SELECT pubkey FROM keys WHERE id = ?", id).Scan(&pub); err != nil {
		return "", fmt.Errorf("key %d: %w", id, err)
	}
	c.remember(pub, id)
	return pub, nil
}

// packHash is how a wire hash is stored: the 32 bytes of 64 lowercase hex digits, anything else
// as the text it is (so every hash reads back exactly as written).
func packHash(h string) any {
	if len(h) != 64 {
		return h
	}
	b := make([]byte, 32)
	for i := range b {
		hi, ok1 := lowerHexDigit(h[2*i])
		lo, ok2 := lowerHexDigit(h[2*i+1])
		if !ok1 || !ok2 {
			return h
		}
		b[i] = hi<<4 | lo
	}
	return b
}

func lowerHexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// hashCol scans a stored wire hash back into its text.
type hashCol struct{ s *string }

// scanHash is the scan destination of a wire_hash column (for storekit's row readers).
func scanHash(s *string) any { return hashCol{s} }

func (h hashCol) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*h.s = ""
	case []byte:
		*h.s = hex.EncodeToString(x)
	case string:
		*h.s = x
	default:
		return fmt.Errorf("wire hash of type %T", v)
	}
	return nil
}
