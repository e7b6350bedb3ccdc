package outbox

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

// fromStates builds a row in each starting state through legal operations only.
var fromStates = []struct {
	name string
	make func(t *testing.T, s *Store, clk *testkit.Clock) Key
}{
	{"pending", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		return mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	}},
	{"relay-accepted", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
		if _, err := s.MarkRelayAccepted(context.Background(), k, acceptance(clk.Now(), "E1", 100)); err != nil {
			t.Fatal(err)
		}
		return k
	}},
	{"relay-accepted+repush", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
		if _, err := s.MarkRelayAccepted(context.Background(), k, acceptance(clk.Now(), "E1", 100)); err != nil {
			t.Fatal(err)
		}
		if n, err := s.RepushRelay(context.Background(), "https://relay.example", "E2"); err != nil || n != 1 {
			t.Fatalf("RepushRelay = %d, %v; want 1, nil", n, err)
		}
		return k
	}},
	{"expired", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
		clk.Advance(DefaultLANDeadline)
		if got, err := s.Sweep(context.Background(), 0); err != nil || len(got) != 1 || got[0].State != StateExpired {
			t.Fatalf("Sweep = %v, %v; want one expired row", got, err)
		}
		return k
	}},
	{"unconfirmed", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
		r, err := s.MarkRelayAccepted(context.Background(), k, acceptance(clk.Now(), "E1", 100))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(r.Deadline.Sub(clk.Now()))
		if got, err := s.Sweep(context.Background(), 0); err != nil || len(got) != 1 || got[0].State != StateUnconfirmed {
			t.Fatalf("Sweep = %v, %v; want one unconfirmed row", got, err)
		}
		return k
	}},
	{"rejected", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
		if _, err := s.MarkRejected(context.Background(), k, TransportLAN, "unpaired", false); err != nil {
			t.Fatal(err)
		}
		return k
	}},
	{"done", func(t *testing.T, s *Store, clk *testkit.Clock) Key {
		k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
		if _, err := s.MarkDelivered(context.Background(), k); err != nil {
			t.Fatal(err)
		}
		return k
	}},
}

type transitionOp struct {
	name string
	do   func(s *Store, clk *testkit.Clock, k Key) (Row, error)
}

var transitionOps = []transitionOp{
	{"delivered", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkDelivered(context.Background(), k)
	}},
	{"failed lan", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkAttemptFailed(context.Background(), k, TransportLAN, errors.New("connection refused"))
	}},
	{"failed relay", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkAttemptFailed(context.Background(), k, TransportRelay, errors.New("502"))
	}},
	{"rejected retryable", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkRejected(context.Background(), k, TransportRelay, "rejected:quota:target", true)
	}},
	{"rejected final relay", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkRejected(context.Background(), k, TransportRelay, "rejected:sender not accepted by target", false)
	}},
	{"rejected final lan", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkRejected(context.Background(), k, TransportLAN, "401 unpaired", false)
	}},
	{"accepted", func(s *Store, clk *testkit.Clock, k Key) (Row, error) {
		return s.MarkRelayAccepted(context.Background(), k, acceptance(clk.Now(), "E2", 200))
	}},
	{"expired", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkExpired(context.Background(), k, "relay expired the item")
	}},
	{"sent v1", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkRelaySentV1(context.Background(), k, "http://v1.relay.example")
	}},
	{"lan unsigned", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		return s.MarkLANUnsigned(context.Background(), k)
	}},
	{"settle", func(s *Store, _ *testkit.Clock, k Key) (Row, error) {
		r, _, err := s.Settle(context.Background(), k.ItemID, k.Host)
		return r, err
	}},
}

// illegalState marks an expected refusal.
const illegalState State = 0

// wantTransition[op][from] is the state after op, or illegalState.
var wantTransition = map[string]map[string]State{
	"delivered":            {"pending": StateDone},
	"failed lan":           {"pending": StatePending},
	"failed relay":         {"pending": StatePending, "relay-accepted+repush": StateRelayAccepted},
	"rejected retryable":   {"pending": StatePending, "relay-accepted+repush": StateRelayAccepted},
	"rejected final relay": {"pending": StateRejected, "relay-accepted+repush": StateRejected},
	"rejected final lan":   {"pending": StateRejected},
	"accepted": {"pending": StateRelayAccepted, "relay-accepted": StateRelayAccepted,
		"relay-accepted+repush": StateRelayAccepted},
	"expired":      {"pending": StateExpired, "relay-accepted": StateExpired, "relay-accepted+repush": StateExpired},
	"sent v1":      {"pending": StatePending},
	"lan unsigned": {"pending": StatePending},
	"settle": {"pending": StateDone, "relay-accepted": StateDone, "relay-accepted+repush": StateDone,
		"expired": StateDone, "unconfirmed": StateDone, "rejected": StateDone, "done": StateDone},
}

func TestTransitions(t *testing.T) {
	for _, op := range transitionOps {
		for _, from := range fromStates {
			want := wantTransition[op.name][from.name]
			t.Run(op.name+"/from "+from.name, func(t *testing.T) {
				s, clk := openTest(t)
				k := from.make(t, s, clk)
				before := mustGet(t, s, k)
				clk.Advance(time.Second)
				got, err := op.do(s, clk, k)
				after := mustGet(t, s, k)
				mustCheck(t, s)
				if want == illegalState {
					var te *TransitionError
					if !errors.As(err, &te) || !errors.Is(err, ErrTransition) {
						t.Fatalf("%s from %s: err = %v, want a *TransitionError", op.name, from.name, err)
					}
					if te.From != before.State || te.Key != k {
						t.Errorf("TransitionError = %+v, want From %s Key %s", te, before.State, k)
					}
					if !reflect.DeepEqual(after, before) {
						t.Errorf("refused %s changed the row:\n got %+v\nwant %+v", op.name, after, before)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s from %s: %v", op.name, from.name, err)
				}
				if got.State != want || after.State != want {
					t.Fatalf("%s from %s: state = %s (stored %s), want %s", op.name, from.name, got.State, after.State, want)
				}
				got.Wire = after.Wire
				if !reflect.DeepEqual(got, after) {
					t.Errorf("returned row differs from stored:\n got %+v\nwant %+v", got, after)
				}
				if !reflect.DeepEqual(after.Wire, before.Wire) {
					t.Errorf("wire bytes changed")
				}
				if from.name == "done" && !reflect.DeepEqual(after, before) {
					t.Errorf("settling a done row changed it")
				}
				if want.Ended() && after.EndedAt.IsZero() {
					t.Errorf("ended row without ended_at")
				}
				if after.Attempts < before.Attempts {
					t.Errorf("attempts went back: %d → %d", before.Attempts, after.Attempts)
				}
			})
		}
	}
}

func TestSettleReturnsPreviousState(t *testing.T) {
	for _, from := range fromStates {
		t.Run(from.name, func(t *testing.T) {
			s, clk := openTest(t)
			k := from.make(t, s, clk)
			before := mustGet(t, s, k)
			r, prev, err := s.Settle(context.Background(), k.ItemID, k.Host)
			if err != nil {
				t.Fatal(err)
			}
			if prev != before.State || r.State != StateDone {
				t.Errorf("Settle = (%s, prev %s), want (done, prev %s)", r.State, prev, before.State)
			}
			if r.LastError != "" || r.Reason != "" || r.Repush || !r.NextAt.IsZero() {
				t.Errorf("settled row keeps %q %q repush=%v next_at=%v", r.LastError, r.Reason, r.Repush, r.NextAt)
			}
		})
	}
}

func TestReceiptRows(t *testing.T) {
	ctx := context.Background()
	s, clk := openTest(t)
	r := mustAdd(t, s, receiptRow("M9", "peer"))[0]
	if r.MsgID != "M9" || r.Kind != KindReceipt {
		t.Fatalf("receipt row = msg %q kind %s, want M9 receipt", r.MsgID, r.Kind)
	}
	// A receipt row is not settled by a delivery receipt.
	_, _, err := s.Settle(ctx, r.ItemID, "peer")
	if !errors.Is(err, ErrTransition) {
		t.Fatalf("Settle(receipt row) err = %v, want ErrTransition", err)
	}
	// The relay's acceptance ends it done: receipts get no receipt of their own.
	got, err := s.MarkRelayAccepted(ctx, r.Key(), acceptance(clk.Now(), "E1", 5))
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateDone || got.Seq != 5 || got.Transport != TransportRelay {
		t.Errorf("accepted receipt row = %s seq %d %s, want done seq 5 relay", got.State, got.Seq, got.Transport)
	}
	mustCheck(t, s)
	if _, ok := AlertFor(got, false); ok {
		t.Errorf("AlertFor(receipt row) ok = true, want false")
	}

	// Settling a message does not touch receipt rows that mention it.
	r2 := mustAdd(t, s, receiptRow("M10", "peer"), envRow("M10", "peer"))
	if _, _, err := s.Settle(ctx, "M10", "peer"); err != nil {
		t.Fatal(err)
	}
	if st := mustGet(t, s, r2[0].Key()).State; st != StatePending {
		t.Errorf("receipt row state after settling the envelope = %s, want pending", st)
	}
}

// TestRelaySentV1: a v1 relay's unsigned "stored" leaves an envelope row pending, due again by
// backoff and marked with where it went, until its delivery receipt; it ends a receipt row done.
func TestRelaySentV1(t *testing.T) {
	ctx := context.Background()
	s, clk := openTest(t)
	const relay = "http://v1.relay.example"
	rows := mustAdd(t, s, envRow("M1", "peer"), receiptRow("M2", "peer"))
	env, rec := rows[0].Key(), rows[1].Key()
	got, err := s.MarkRelaySentV1(ctx, env, relay)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StatePending || got.Attempts != 1 || got.Transport != TransportRelay || got.Relay != relay ||
		!got.RelayV1At.Equal(clk.Now()) || !got.NextAt.After(clk.Now()) || got.Epoch != "" || len(got.Statement) != 0 {
		t.Fatalf("envelope row after a v1 push = %+v", got)
	}
	if d, err := s.Due(ctx, 10); err != nil || len(d) != 1 || d[0].Key() != rec {
		t.Fatalf("due = %v, %v; want only the receipt row (the envelope waits for its backoff)", d, err)
	}
	// Encoded and listed with the mark.
	if again := mustGet(t, s, env); !again.RelayV1At.Equal(got.RelayV1At) || again.Relay != relay {
		t.Fatalf("stored row = %+v", again)
	}
	js, err := got.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Row
	if err := back.UnmarshalJSON(js); err != nil || !back.RelayV1At.Equal(got.RelayV1At) {
		t.Fatalf("JSON round trip %s: %+v, %v", js, back, err)
	}
	if r, err := s.MarkRelaySentV1(ctx, rec, relay); err != nil || r.State != StateDone || r.Transport != TransportRelay {
		t.Fatalf("receipt row after a v1 push = %+v, %v; want done", r, err)
	}
	if _, err := s.MarkRelaySentV1(ctx, env, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no relay: %v, want ErrInvalid", err)
	}
	mustCheck(t, s)
	// Its delivery receipt settles it.
	if r, _, err := s.Settle(ctx, "M1", "peer"); err != nil || r.State != StateDone {
		t.Fatalf("settle = %+v, %v", r, err)
	}
	mustCheck(t, s)
}

func TestAttemptOnRelayAcceptedNeverLAN(t *testing.T) {
	ctx := context.Background()
	s, clk := openTest(t)
	k := fromStates[2].make(t, s, clk) // relay-accepted + repush: due, but for the relay only
	_, err := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("x"))
	var te *TransitionError
	if !errors.As(err, &te) || te.Cause == "" {
		t.Fatalf("LAN failure on a re-push row: err = %v, want TransitionError with a cause", err)
	}
	if _, err := s.MarkDelivered(ctx, k); !errors.Is(err, ErrTransition) {
		t.Fatalf("MarkDelivered on a relay-accepted row: err = %v, want ErrTransition", err)
	}
}

// TestLANUnsigned: a LAN peer's unsigned "stored" leaves an envelope row pending, due again by
// backoff and marked, until its delivery receipt; it ends a receipt row done; the mark survives
// the stored form and JSON; and an expiry alert says the peer claimed it.
func TestLANUnsigned(t *testing.T) {
	ctx := context.Background()
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "peer"), receiptRow("M2", "peer"), envRow("M3", "peer"))
	env, rec, lapsed := rows[0].Key(), rows[1].Key(), rows[2].Key()
	got, err := s.MarkLANUnsigned(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StatePending || got.Attempts != 1 || got.Transport != TransportLAN || got.LANFailures != 0 ||
		!got.LANUnsignedAt.Equal(clk.Now()) || !got.NextAt.After(clk.Now()) || !got.EndedAt.IsZero() {
		t.Fatalf("envelope row after an unsigned LAN answer = %+v", got)
	}
	if d, err := s.Due(ctx, 10); err != nil || len(d) != 2 || d[0].Key() == env || d[1].Key() == env {
		t.Fatalf("due = %v, %v; want the others only (the envelope waits for its backoff)", d, err)
	}
	if again := mustGet(t, s, env); !again.LANUnsignedAt.Equal(got.LANUnsignedAt) {
		t.Fatalf("stored row = %+v", again)
	}
	js, err := got.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"lan_unsigned_at":"`+got.LANUnsignedAt.Format(isoLayout)+`"`)) {
		t.Fatalf("JSON %s lacks lan_unsigned_at", js)
	}
	var back Row
	if err := back.UnmarshalJSON(js); err != nil || !back.LANUnsignedAt.Equal(got.LANUnsignedAt) {
		t.Fatalf("JSON round trip %s: %+v, %v", js, back, err)
	}
	if r, err := s.MarkLANUnsigned(ctx, rec); err != nil || r.State != StateDone || r.Transport != TransportLAN || r.LANUnsignedAt.IsZero() {
		t.Fatalf("receipt row after an unsigned LAN answer = %+v, %v; want done and marked", r, err)
	}
	mustCheck(t, s)
	if r, _, err := s.Settle(ctx, "M1", "peer"); err != nil || r.State != StateDone {
		t.Fatalf("settle = %+v, %v", r, err)
	}
	// A row that only ever got unsigned answers and no receipt expires with an alert that says so.
	if _, err := s.MarkLANUnsigned(ctx, lapsed); err != nil {
		t.Fatal(err)
	}
	r, err := s.MarkExpired(ctx, lapsed, "not delivered within 72h")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := AlertFor(r, false)
	if !ok || !strings.Contains(a.Body, "without a signed statement") || !strings.Contains(a.Body, r.LANUnsignedAt.Format(isoLayout)) {
		t.Fatalf("alert = %+v, %v", a, ok)
	}
}
