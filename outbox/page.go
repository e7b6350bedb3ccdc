package outbox

import (
	"bytes"
	"context"
	"fmt"
	"slices"
)

// Page is the newest rows of some states, oldest first, and how many older ones it left out.
type Page struct {
	Rows []Row // without wire bytes
	More int
}

// Page returns the newest limit rows (limit ≥ 1) whose state is one of states (none: every
// state), ordered as List orders them, and counts the older matching rows it left out. It walks
// the created index from its end: only the rows it returns are decoded; the others are counted
// by their index entries, so a page of an outbox of 100,000 rows reads 100,000 short keys and
// decodes limit rows.
func (t *Tx) Page(states []State, limit int) (Page, error) {
	if err := t.readable("page"); err != nil {
		return Page{}, err
	}
	if limit < 1 {
		return Page{}, fmt.Errorf("outbox: page: %w: limit %d", ErrInvalid, limit)
	}
	var want [StateDone + 1]bool
	for _, s := range states {
		if !s.valid() {
			return Page{}, fmt.Errorf("outbox: page: %w: state %d", ErrInvalid, uint8(s))
		}
		want[s] = true
	}
	matchAll := len(states) == 0
	var rks [][]byte
	more := 0
	c := t.b.created.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		if len(k) < 9 || len(v) != 1 || !State(v[0]).valid() {
			return Page{}, fmt.Errorf("outbox: page: %w: created index entry %q → %x", ErrCorrupt, k, v)
		}
		switch {
		case !matchAll && !want[v[0]]:
		case len(rks) < limit:
			rks = append(rks, bytes.Clone(k[8:]))
		default:
			more++
		}
	}
	rows, err := t.loadRows(rks, "created")
	if err != nil {
		return Page{}, fmt.Errorf("outbox: page: %w", err)
	}
	slices.Reverse(rows)
	return Page{Rows: rows, More: more}, nil
}

// Page lists a page of rows (see Tx.Page).
func (s *Store) Page(ctx context.Context, states []State, limit int) (Page, error) {
	return view(ctx, s, func(t *Tx) (Page, error) { return t.Page(states, limit) })
}
