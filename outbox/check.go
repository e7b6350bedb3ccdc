package outbox

import (
	"bytes"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"
)

// maxProblems bounds how many problems Check reports.
const maxProblems = 20

// Check reads every row and every index entry and verifies that they agree: each row decodes,
// sits under its own key, has its wire bytes and a consistent state (next_at set exactly when
// due-tracked, a deadline on active rows, relay fields on relay-accepted rows), and each index
// holds exactly the entries the rows call for. It returns nil or an error wrapping ErrCorrupt
// that lists up to 20 problems. It costs O(all rows); doctor and tests use it, the daemon's
// passes do not.
func (t *Tx) Check() error {
	if err := t.readable("check"); err != nil {
		return err
	}
	var problems []error
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	want := map[string]map[string][]byte{
		"due": {}, "host": {}, "relay": {}, "deadline": {}, "ended": {}, "created": {},
	}
	err := t.b.rows.ForEach(func(k, v []byte) error {
		key, ok := parseRowKey(k)
		if !ok {
			report("row key %q is malformed", k)
			return nil
		}
		r, err := decodeRow(v)
		if err != nil {
			report("row %s: %v", key, err)
			return nil
		}
		if r.Key() != key {
			report("row %s is stored under %s", r.Key(), key)
			return nil
		}
		if t.b.wire.Get(k) == nil {
			report("row %s has no wire bytes", key)
		}
		for _, p := range rowProblems(&r) {
			report("row %s: %s", key, p)
		}
		e := entriesOf(&r, k)
		add := func(index string, ik, iv []byte) {
			if ik != nil {
				want[index][string(ik)] = iv
			}
		}
		add("due", e.due, nil)
		add("host", e.host, e.hostVal)
		add("relay", e.relay, nil)
		add("deadline", e.deadline, nil)
		add("ended", e.ended, nil)
		add("created", e.created, e.createdVal)
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: check: %w", err)
	}
	_ = t.b.wire.ForEach(func(k, _ []byte) error {
		if t.b.rows.Get(k) == nil {
			report("wire bytes %q have no row", k)
		}
		return nil
	})
	for _, ix := range []struct {
		name string
		b    *bbolt.Bucket
	}{{"due", t.b.due}, {"host", t.b.host}, {"relay", t.b.relay}, {"deadline", t.b.deadline}, {"ended", t.b.ended}, {"created", t.b.created}} {
		exp := want[ix.name]
		seen := 0
		_ = ix.b.ForEach(func(k, v []byte) error {
			wv, ok := exp[string(k)]
			switch {
			case !ok:
				report("%s index has a stray entry %q", ix.name, k)
			case !bytes.Equal(wv, v):
				report("%s index entry %q has value %x, want %x", ix.name, k, v, wv)
			default:
				seen++
			}
			return nil
		})
		if seen != len(exp) {
			report("%s index lacks %d entries", ix.name, len(exp)-seen)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("outbox: check: %w: %w", ErrCorrupt, errors.Join(problems...))
}

// rowProblems lists the ways r breaks the row invariants.
func rowProblems(r *Row) []string {
	var p []string
	if r.due() == r.NextAt.IsZero() {
		p = append(p, fmt.Sprintf("next_at %v does not match state %s (repush %v)", r.NextAt, r.State, r.Repush))
	}
	if r.Repush && r.State != StateRelayAccepted {
		p = append(p, "repush set on a "+r.State.String()+" row")
	}
	if r.State.Active() && r.Deadline.IsZero() {
		p = append(p, "active row without a deadline")
	}
	if r.State.Ended() && r.EndedAt.IsZero() {
		p = append(p, "ended row without ended_at")
	}
	if r.State == StateRelayAccepted && (r.Relay == "" || r.Epoch == "" || r.Seq <= 0 || len(r.Statement) == 0) {
		p = append(p, "relay-accepted row without relay, epoch, seq or statement")
	}
	if r.State == StateRelayAccepted && r.Kind == KindReceipt {
		p = append(p, "receipt row in relay-accepted")
	}
	if r.CreatedAt.IsZero() {
		p = append(p, "no created_at")
	}
	switch r.Kind {
	case KindEnvelope:
		if r.MsgID != r.ItemID {
			p = append(p, "envelope msg_id differs from item_id")
		}
	case KindReceipt:
		if m, ok := receiptMsg(r.ItemID); !ok || m != r.MsgID {
			p = append(p, "receipt msg_id does not match its item id")
		}
	}
	return p
}
