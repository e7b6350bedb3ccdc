package outbox

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The model is a naive in-memory restatement of the outbox rules: a map of rows and linear scans.
// TestModel drives the store and the model with the same random operations and compares every
// answer, the due set, and Check's verdict on the indexes.

type mrow struct {
	key                Key
	kind               Kind
	hostKey            string
	state              State
	attempts, lanFails int
	nextAt             time.Time // zero when not due-tracked
	repush             bool
	deadline, endedAt  time.Time
	relay, epoch       string
	seq                int64
	transport          Transport
}

type model struct {
	rows map[Key]*mrow
	now  time.Time
}

func (m *model) dueTracked(r *mrow) bool {
	return r.state == StatePending || (r.state == StateRelayAccepted && r.repush)
}

func rkString(k Key) string { return string(rowKey(k)) }

// due lists due rows in (next_at, key) order.
func (m *model) due() []Key {
	var rs []*mrow
	for _, r := range m.rows {
		if m.dueTracked(r) && !r.nextAt.After(m.now) {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *mrow) int {
		if c := a.nextAt.Compare(b.nextAt); c != 0 {
			return c
		}
		return cmp.Compare(rkString(a.key), rkString(b.key))
	})
	out := make([]Key, len(rs))
	for i, r := range rs {
		out[i] = r.key
	}
	return out
}

var errModelNotFound, errModelExists, errModelIllegal = ErrNotFound, ErrExists, ErrTransition

func (m *model) attemptable(r *mrow, tr Transport) bool {
	return r.state == StatePending || (r.state == StateRelayAccepted && r.repush && tr == TransportRelay)
}

func (m *model) end(r *mrow, s State) {
	r.state, r.endedAt, r.nextAt, r.repush = s, m.now, time.Time{}, false
}

func (m *model) add(n NewRow) error {
	k := Key{n.ItemID, n.Host}
	if m.rows[k] != nil {
		return errModelExists
	}
	m.rows[k] = &mrow{key: k, kind: n.Kind, hostKey: n.HostKey, state: StatePending, nextAt: m.now,
		deadline: m.now.Add(72 * time.Hour), transport: n.Transport}
	return nil
}

func (m *model) failed(k Key, tr Transport, rejected, retryable bool) error {
	r := m.rows[k]
	if r == nil {
		return errModelNotFound
	}
	if !m.attemptable(r, tr) {
		return errModelIllegal
	}
	delay := Backoff(r.attempts)
	r.attempts++
	r.transport = tr
	if rejected && !retryable {
		m.end(r, StateRejected)
		return nil
	}
	if tr == TransportLAN && !rejected {
		r.lanFails++
	}
	r.nextAt = m.now.Add(delay)
	return nil
}

func (m *model) delivered(k Key) error {
	r := m.rows[k]
	if r == nil {
		return errModelNotFound
	}
	if r.state != StatePending {
		return errModelIllegal
	}
	r.attempts++
	r.transport = TransportLAN
	m.end(r, StateDone)
	return nil
}

func (m *model) accepted(k Key, a Acceptance) error {
	r := m.rows[k]
	if r == nil {
		return errModelNotFound
	}
	if !r.state.Active() {
		return errModelIllegal
	}
	r.attempts++
	r.transport = TransportRelay
	r.relay, r.epoch, r.seq = a.Relay, a.Epoch, a.Seq
	if r.kind == KindReceipt {
		m.end(r, StateDone)
		return nil
	}
	r.state, r.repush, r.nextAt = StateRelayAccepted, false, time.Time{}
	r.deadline = a.AcceptedAt.Add(a.Retention + 24*time.Hour)
	return nil
}

func (m *model) expired(k Key) error {
	r := m.rows[k]
	if r == nil {
		return errModelNotFound
	}
	if !r.state.Active() {
		return errModelIllegal
	}
	m.end(r, StateExpired)
	return nil
}

func (m *model) settle(msg, host string) (State, error) {
	r := m.rows[Key{msg, host}]
	if r == nil {
		return 0, errModelNotFound
	}
	if r.kind == KindReceipt {
		return 0, errModelIllegal
	}
	prev := r.state
	if prev != StateDone {
		m.end(r, StateDone)
	}
	return prev, nil
}

func (m *model) sweep() []Key {
	var out []Key
	for _, r := range m.rows {
		if r.state.Active() && !r.deadline.After(m.now) {
			if r.state == StatePending {
				m.end(r, StateExpired)
			} else {
				m.end(r, StateUnconfirmed)
			}
			out = append(out, r.key)
		}
	}
	return out
}

func (m *model) makeDue(host string) int {
	n := 0
	for _, r := range m.rows {
		if r.key.Host == host && m.dueTracked(r) && r.nextAt.After(m.now) {
			r.nextAt = m.now
			n++
		}
	}
	return n
}

func (m *model) repush(relay, epoch string) int {
	n := 0
	for _, r := range m.rows {
		if r.state == StateRelayAccepted && r.relay == relay && !r.repush && (epoch == "" || r.epoch != epoch) {
			r.repush, r.nextAt = true, m.now
			n++
		}
	}
	return n
}

func (m *model) claim(limit int, lease time.Duration) []Key {
	keys := m.due()
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	for _, k := range keys {
		m.rows[k].nextAt = m.now.Add(lease)
	}
	return keys
}

func (m *model) prune(before time.Time) int {
	n := 0
	for k, r := range m.rows {
		if r.state.Ended() && r.endedAt.Before(before) {
			delete(m.rows, k)
			n++
		}
	}
	return n
}

func (m *model) rebind(host, key string) int {
	n := 0
	for _, r := range m.rows {
		if r.key.Host == host && r.state.Active() && r.hostKey != key {
			r.hostKey = key
			n++
		}
	}
	return n
}

// sameErr compares a store error with the model's expectation by sentinel.
func sameErr(got, want error) bool {
	if want == nil {
		return got == nil
	}
	return errors.Is(got, want)
}

func sortedKeys(ks []Key) []Key {
	out := slices.Clone(ks)
	slices.SortFunc(out, func(a, b Key) int { return cmp.Compare(rkString(a), rkString(b)) })
	return out
}

func TestModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	steps := 1500
	if testing.Short() {
		seeds, steps = seeds[:1], 800
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { runModel(t, seed, steps) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	s, clk := openTest(t)
	m := &model{rows: map[Key]*mrow{}, now: clk.Now()}
	hosts := []string{"alpha", "alph", "beta", "gamma"}
	relays := []string{"https://r1.example", "https://r2.example"}
	epochs := []string{"E1", "E2", "E3"}
	pickHost := func() string { return hosts[rng.IntN(len(hosts))] }
	pickItem := func() (string, Kind) {
		i := rng.IntN(14)
		if i >= 11 {
			return fmt.Sprintf("receipt:M%d:bob@x:%d", i-11, i), KindReceipt
		}
		return fmt.Sprintf("M%d", i), KindEnvelope
	}
	pickKey := func() Key { id, _ := pickItem(); return Key{id, pickHost()} }
	pickTr := func() Transport { return []Transport{TransportLAN, TransportRelay}[rng.IntN(2)] }

	for step := range steps {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
		}
		var op string
		switch p := rng.IntN(100); {
		case p < 18:
			id, kind := pickItem()
			n := NewRow{Kind: kind, ItemID: id, Host: pickHost(), HostKey: testKey(rng.IntN(3)),
				Wire: fmt.Appendf(nil, "wire %s %d", id, step), Agent: "alice", Transport: Transport(rng.IntN(3))}
			op = "add " + n.ItemID + "→" + n.Host
			_, err := s.Add(ctx, n)
			if want := m.add(n); !sameErr(err, want) {
				fail("%s: err %v, want %v", op, err, want)
			}
		case p < 32:
			k, tr := pickKey(), pickTr()
			op = "failed " + k.String()
			_, err := s.MarkAttemptFailed(ctx, k, tr, errors.New("err"))
			if want := m.failed(k, tr, false, false); !sameErr(err, want) {
				fail("%s %s: err %v, want %v", op, tr, err, want)
			}
		case p < 40:
			k, tr, retry := pickKey(), pickTr(), rng.IntN(2) == 0
			op = "rejected " + k.String()
			_, err := s.MarkRejected(ctx, k, tr, "rejected:quota:target", retry)
			if want := m.failed(k, tr, true, retry); !sameErr(err, want) {
				fail("%s %s %v: err %v, want %v", op, tr, retry, err, want)
			}
		case p < 46:
			k := pickKey()
			op = "delivered " + k.String()
			_, err := s.MarkDelivered(ctx, k)
			if want := m.delivered(k); !sameErr(err, want) {
				fail("%s: err %v, want %v", op, err, want)
			}
		case p < 58:
			k := pickKey()
			a := acceptance(m.now.Add(-time.Duration(rng.IntN(1000))*time.Millisecond), epochs[rng.IntN(3)], int64(1+rng.IntN(1000)))
			a.Relay = relays[rng.IntN(2)]
			a.Retention = time.Duration(1+rng.IntN(20)) * time.Hour
			op = "accepted " + k.String()
			_, err := s.MarkRelayAccepted(ctx, k, a)
			if want := m.accepted(k, a); !sameErr(err, want) {
				fail("%s: err %v, want %v", op, err, want)
			}
		case p < 61:
			k := pickKey()
			op = "expired " + k.String()
			_, err := s.MarkExpired(ctx, k, "relay notice")
			if want := m.expired(k); !sameErr(err, want) {
				fail("%s: err %v, want %v", op, err, want)
			}
		case p < 67:
			k := pickKey()
			op = "settle " + k.String()
			_, prev, err := s.Settle(ctx, k.ItemID, k.Host)
			wantPrev, want := m.settle(k.ItemID, k.Host)
			if !sameErr(err, want) || (err == nil && prev != wantPrev) {
				fail("%s: (%s, %v), want (%s, %v)", op, prev, err, wantPrev, want)
			}
		case p < 72:
			op = "sweep"
			got, err := s.Sweep(ctx, 0)
			if err != nil {
				fail("sweep: %v", err)
			}
			if g, w := sortedKeys(keysOf(got)), sortedKeys(m.sweep()); !slices.Equal(g, w) {
				fail("sweep = %v, want %v", g, w)
			}
		case p < 77:
			h := pickHost()
			op = "make due " + h
			n, err := s.MakeDue(ctx, h)
			if want := m.makeDue(h); err != nil || n != want {
				fail("%s = %d, %v; want %d", op, n, err, want)
			}
		case p < 81:
			relay, epoch := relays[rng.IntN(2)], append(epochs, "")[rng.IntN(4)]
			op = "repush " + relay + " " + epoch
			n, err := s.RepushRelay(ctx, relay, epoch)
			if want := m.repush(relay, epoch); err != nil || n != want {
				fail("%s = %d, %v; want %d", op, n, err, want)
			}
		case p < 85:
			limit, lease := rng.IntN(4), time.Duration(1+rng.IntN(120))*time.Second
			op = "claim"
			got, err := s.Claim(ctx, limit, lease)
			if want := m.claim(limit, lease); err != nil || !slices.Equal(keysOf(got), want) {
				fail("claim(%d) = %v, %v; want %v", limit, keysOf(got), err, want)
			}
		case p < 87:
			before := m.now.Add(-time.Duration(rng.IntN(48)) * time.Hour)
			op = "prune"
			n, err := s.Prune(ctx, before, 0)
			if want := m.prune(before); err != nil || n != want {
				fail("prune = %d, %v; want %d", n, err, want)
			}
		case p < 89:
			h, key := pickHost(), testKey(rng.IntN(3))
			op = "rebind " + h
			n, err := s.RebindHost(ctx, h, key)
			if want := m.rebind(h, key); err != nil || n != want {
				fail("%s = %d, %v; want %d", op, n, err, want)
			}
		case p < 92:
			// Operations inside a caller's transaction that then fails: nothing may change.
			op = "rolled back"
			boom := errors.New("boom")
			err := s.Update(ctx, func(ob *Tx) error {
				k := pickKey()
				_, _ = ob.MarkAttemptFailed(k, TransportLAN, errors.New("x"))
				_, _, _ = ob.Settle(k.ItemID, k.Host)
				_, _ = ob.Sweep(0)
				_, _ = ob.Add(envRow(fmt.Sprintf("R%d", step), "alpha"))
				return boom
			})
			if !errors.Is(err, boom) {
				fail("rolled-back update: %v", err)
			}
		default:
			d := time.Duration(rng.IntN(7200)) * time.Second
			if rng.IntN(10) == 0 {
				d = time.Duration(rng.IntN(30)) * time.Hour
			}
			op = "advance"
			clk.Advance(d)
			m.now = clk.Now()
		}
		compareModel(t, s, m, fmt.Sprintf("seed %d step %d (%s)", seed, step, op), step%25 == 0)
	}
	compareModel(t, s, m, "end", true)
}

// compareModel checks the due set always, and every row and Check when full.
func compareModel(t *testing.T, s *Store, m *model, where string, full bool) {
	t.Helper()
	due, err := s.Due(ctx, 0)
	if err != nil {
		t.Fatalf("%s: Due: %v", where, err)
	}
	if got, want := keysOf(due), m.due(); !slices.Equal(got, want) {
		t.Fatalf("%s: Due = %v, want %v", where, got, want)
	}
	at, ok, err := s.NextDue(ctx)
	var wantAt time.Time
	for _, r := range m.rows {
		if m.dueTracked(r) && (wantAt.IsZero() || r.nextAt.Before(wantAt)) {
			wantAt = r.nextAt
		}
	}
	if err != nil || ok == wantAt.IsZero() || (ok && !at.Equal(wantAt)) {
		t.Fatalf("%s: NextDue = %v, %v, %v; want %v", where, at, ok, err, wantAt)
	}
	if !full {
		return
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	rows, err := s.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(m.rows) {
		t.Fatalf("%s: store has %d rows, model %d", where, len(rows), len(m.rows))
	}
	for _, r := range rows {
		w := m.rows[r.Key()]
		if w == nil {
			t.Fatalf("%s: store has %s, model does not", where, r.Key())
		}
		got := mrow{key: r.Key(), kind: r.Kind, hostKey: r.HostKey, state: r.State, attempts: r.Attempts,
			lanFails: r.LANFailures, nextAt: r.NextAt, repush: r.Repush, deadline: r.Deadline, endedAt: r.EndedAt,
			relay: r.Relay, epoch: r.Epoch, seq: r.Seq, transport: r.Transport}
		if got != *w {
			t.Fatalf("%s: row %s\n got %+v\nwant %+v", where, r.Key(), got, *w)
		}
	}
	active, err := s.List(ctx, Filter{Active: true})
	if err != nil {
		t.Fatal(err)
	}
	nActive := 0
	for _, r := range m.rows {
		if r.state.Active() {
			nActive++
		}
	}
	if len(active) != nActive {
		t.Fatalf("%s: List(Active) = %d rows, model %d", where, len(active), nActive)
	}
}
