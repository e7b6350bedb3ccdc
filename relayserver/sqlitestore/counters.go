package sqlitestore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentmbx/agentmbx/relayserver"
)

// The queue counters (seqs.next_seq and the usage rows) change with every queued item, but are
// written once per transaction: a transaction keeps what it changed in memory (pending) and
// writes it just before COMMIT, one statement for the seqs and one for the usage rows however many
// items it queued. The writer also remembers committed counter values (counters), so admitting an
// item reads none of them from the database once its target and sender were seen. Both rest on
// this process being the store's only writer.

// usageKey names a usage row; sender "" is the target's total.
type usageKey struct{ target, sender string }

// counters holds counter values known to equal the committed rows.
type counters struct {
	seqs  map[string]int64 // target → next_seq (0: no row)
	usage map[usageKey]relayserver.Counts
}

func newCounters() counters {
	return counters{seqs: map[string]int64{}, usage: map[usageKey]relayserver.Counts{}}
}

// reset forgets everything (after a COMMIT whose outcome is unknown).
func (c *counters) reset() {
	clear(c.seqs)
	clear(c.usage)
}

// pending is what a transaction changed and has not written yet: seqs as the new next_seq, usage
// as deltas. A savepoint rolls it back with the undo log.
type pending struct {
	seqs  map[string]int64
	usage map[usageKey]relayserver.Counts
	undo  []undoEntry
	// flushed: counters were written before the end of the transaction, so the database holds
	// uncommitted counter rows and nothing read from it may be remembered as committed.
	flushed bool
}

// undoEntry restores one pending value as it was before a change made inside a savepoint.
type undoEntry struct {
	seq  bool // a seqs entry (key.target); else a usage entry
	key  usageKey
	had  bool
	n    int64
	used relayserver.Counts
}

// mark is the position a savepoint rolls pending back to.
func (t *tx) mark() int { return len(t.p.undo) }

// rollbackTo undoes the pending changes made after m.
func (t *tx) rollbackTo(m int) {
	for i := len(t.p.undo) - 1; i >= m; i-- {
		u := t.p.undo[i]
		switch {
		case u.seq && u.had:
			t.p.seqs[u.key.target] = u.n
		case u.seq:
			delete(t.p.seqs, u.key.target)
		case u.had:
			t.p.usage[u.key] = u.used
		default:
			delete(t.p.usage, u.key)
		}
	}
	t.p.undo = t.p.undo[:m]
}

// setSeq records next_seq of target.
func (t *tx) setSeq(target string, next int64) {
	if t.p.seqs == nil {
		t.p.seqs = map[string]int64{}
	}
	if t.depth > 0 {
		old, had := t.p.seqs[target]
		t.p.undo = append(t.p.undo, undoEntry{seq: true, key: usageKey{target: target}, had: had, n: old})
	}
	t.p.seqs[target] = next
}

// addUsage adds (items, bytes) to the target's total and to the sender's share.
func (t *tx) addUsage(target, sender string, items, bytes int64) {
	if t.p.usage == nil {
		t.p.usage = map[usageKey]relayserver.Counts{}
	}
	for _, k := range [2]usageKey{{target, ""}, {target, sender}} {
		old, had := t.p.usage[k]
		if t.depth > 0 {
			t.p.undo = append(t.p.undo, undoEntry{key: k, had: had, used: old})
		}
		t.p.usage[k] = relayserver.Counts{Items: old.Items + items, Bytes: old.Bytes + bytes}
	}
}

// addDedup adds n to the dedup rows charged to sender: its usage row with the empty target.
func (t *tx) addDedup(sender string, n int64) {
	if t.p.usage == nil {
		t.p.usage = map[usageKey]relayserver.Counts{}
	}
	k := usageKey{"", sender}
	old, had := t.p.usage[k]
	if t.depth > 0 {
		t.p.undo = append(t.p.undo, undoEntry{key: k, had: had, used: old})
	}
	t.p.usage[k] = relayserver.Counts{Items: old.Items + n}
}

// pendingDedup reports whether this transaction changed a sender's dedup counter.
func (t *tx) pendingDedup() bool {
	for k, d := range t.p.usage {
		if k.target == "" && d != (relayserver.Counts{}) {
			return true
		}
	}
	return false
}

// nextSeq returns next_seq of target as this transaction sees it (0: none yet).
func (t *tx) nextSeq(target string) (int64, error) {
	if n, ok := t.p.seqs[target]; ok {
		return n, nil
	}
	if n, ok := t.c.seqs[target]; ok {
		return n, nil
	}
	var n int64
	err := t.q.QueryRowContext(bg, "SELECT next_seq FROM seqs WHERE target_pubkey = ?", target).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("next seq: %w", err)
	}
	if !t.p.flushed {
		t.c.remember(func() { t.c.seqs[target] = n })
	}
	return n, nil
}

// allocSeq returns max(next_seq, atMS, 1) for target and advances next_seq past it.
func (t *tx) allocSeq(target string, atMS int64) (int64, error) {
	next, err := t.nextSeq(target)
	if err != nil {
		return 0, err
	}
	seq := max(next, atMS, 1)
	t.setSeq(target, seq+1)
	return seq, nil
}

// usage returns the usage row k as this transaction sees it.
func (t *tx) usage(k usageKey) (relayserver.Counts, error) {
	base, ok := t.c.usage[k]
	if !ok {
		err := t.q.QueryRowContext(bg,
			"SELECT items, bytes FROM usage WHERE target_pubkey = ? AND sender_pubkey = ?", k.target, k.sender).
			Scan(&base.Items, &base.Bytes)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return base, fmt.Errorf("usage: %w", err)
		}
		if !t.p.flushed {
			t.c.remember(func() { t.c.usage[k] = base })
		}
	}
	d := t.p.usage[k]
	return relayserver.Counts{Items: base.Items + d.Items, Bytes: base.Bytes + d.Bytes}, nil
}

// remember runs add unless the counters are full, in which case they start over first.
func (c *counters) remember(add func()) {
	if len(c.seqs)+len(c.usage) >= maxCachedKeys {
		c.reset()
	}
	add()
}

const (
	flushSeqsSQL = `INSERT INTO seqs(target_pubkey, next_seq) SELECT key, value FROM json_each(?) WHERE true
ON CONFLICT(target_pubkey) DO UPDATE SET next_seq = excluded.next_seq`
	flushUsageSQL = `INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?) WHERE true
ON CONFLICT(target_pubkey, sender_pubkey) DO UPDATE SET items = items + excluded.items,
	bytes = bytes + excluded.bytes`
	// A queue's rows go once it holds nothing (from the sender, or at all).
	dropUsageSQL = `DELETE FROM usage WHERE items <= 0 AND (target_pubkey, sender_pubkey) IN
	(SELECT value->>0, value->>1 FROM json_each(?))`
)

// flush writes the pending counters. Before the end of the transaction (mid), the committed
// values are forgotten: the rows now hold this transaction's.
func (t *tx) flush(mid bool) error {
	if len(t.p.seqs) > 0 {
		js, err := json.Marshal(t.p.seqs)
		if err != nil {
			return fmt.Errorf("write seqs: %w", err)
		}
		if _, err := t.q.ExecContext(bg, flushSeqsSQL, string(js)); err != nil {
			return fmt.Errorf("write seqs: %w", err)
		}
	}
	if len(t.p.usage) > 0 {
		rows := make([][4]any, 0, len(t.p.usage))
		drop := false
		for k, d := range t.p.usage {
			if d != (relayserver.Counts{}) {
				rows = append(rows, [4]any{k.target, k.sender, d.Items, d.Bytes})
				drop = drop || d.Items < 0
			}
		}
		// A text argument: SQLite reads a blob given to json_each as JSONB.
		js, err := json.Marshal(rows)
		if err != nil {
			return fmt.Errorf("write usage: %w", err)
		}
		if _, err := t.q.ExecContext(bg, flushUsageSQL, string(js)); err != nil {
			return fmt.Errorf("write usage: %w", err)
		}
		if drop {
			if _, err := t.q.ExecContext(bg, dropUsageSQL, string(js)); err != nil {
				return fmt.Errorf("write usage: %w", err)
			}
		}
	}
	if mid {
		t.p.flushed = true
		t.c.reset()
		t.dropPending()
	}
	return nil
}

// dropPending empties pending (recorded in the undo log inside a savepoint: rolled back, the
// rows the flush wrote are rolled back too and pending holds them again).
func (t *tx) dropPending() {
	if t.depth > 0 {
		for k, n := range t.p.seqs {
			t.p.undo = append(t.p.undo, undoEntry{seq: true, key: usageKey{target: k}, had: true, n: n})
		}
		for k, u := range t.p.usage {
			t.p.undo = append(t.p.undo, undoEntry{key: k, had: true, used: u})
		}
	}
	clear(t.p.seqs)
	clear(t.p.usage)
}

// committed takes in the counters of a transaction that committed.
func (c *counters) committed(p *pending) {
	if p.flushed {
		c.reset() // rows read after a flush may have been remembered as committed: start over
		return
	}
	for k, n := range p.seqs {
		c.remember(func() { c.seqs[k] = n })
	}
	for k, d := range p.usage {
		if u, ok := c.usage[k]; ok {
			u.Items, u.Bytes = u.Items+d.Items, u.Bytes+d.Bytes
			if u.Items <= 0 {
				u = relayserver.Counts{} // the row was deleted
			}
			c.usage[k] = u
		}
	}
}
