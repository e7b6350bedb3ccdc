package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

var ctx = context.Background()

func TestBackoffSchedule(t *testing.T) {
	tests := []struct {
		attempts int
		want     time.Duration
	}{
		{-1, 5 * time.Second},
		{0, 5 * time.Second},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{6, 320 * time.Second},
		{9, 2560 * time.Second},
		{10, time.Hour},
		{11, time.Hour},
		{63, time.Hour},
		{1 << 30, time.Hour},
	}
	for _, tt := range tests {
		if got := Backoff(tt.attempts); got != tt.want {
			t.Errorf("Backoff(%d) = %v, want %v", tt.attempts, got, tt.want)
		}
	}
}

// TestDueRespectsNextAt walks a row through repeated failures: each time it is not due one
// millisecond before next_at and due at next_at, and next_at follows the backoff schedule.
func TestDueRespectsNextAt(t *testing.T) {
	s, clk := openTest(t)
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	for n := 0; n < 14; n++ {
		due, err := s.Due(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(due); !slices.Equal(got, []Key{k}) {
			t.Fatalf("attempt %d: Due = %v, want [%s]", n, got, k)
		}
		tr := []Transport{TransportLAN, TransportRelay}[n%2]
		r, err := s.MarkAttemptFailed(ctx, k, tr, fmt.Errorf("failure %d", n))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.NextAt.Sub(clk.Now()), Backoff(n); got != want {
			t.Fatalf("after failure %d: next_at - now = %v, want %v", n+1, got, want)
		}
		if r.Attempts != n+1 || r.LANFailures != (n+2)/2 || r.Transport != tr || r.LastError != fmt.Sprintf("failure %d", n) {
			t.Fatalf("after failure %d: attempts %d lan_failures %d transport %s last_error %q",
				n+1, r.Attempts, r.LANFailures, r.Transport, r.LastError)
		}
		clk.Advance(Backoff(n) - time.Millisecond)
		if due, _ := s.Due(ctx, 0); len(due) != 0 {
			t.Fatalf("after failure %d: due 1 ms early", n+1)
		}
		clk.Advance(time.Millisecond)
	}
	mustCheck(t, s)
}

func TestDueOrderAndLimit(t *testing.T) {
	s, clk := openTest(t)
	var want []Key
	for i := range 5 {
		want = append(want, mustAdd(t, s, envRow(fmt.Sprintf("M%d", i), "peer"))[0].Key())
		clk.Advance(time.Second)
	}
	// M0 backs off: the rest stay in creation order, M0 comes last once due.
	if _, err := s.MarkAttemptFailed(ctx, want[0], TransportLAN, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	due, err := s.Due(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := append(slices.Clone(want[1:]), want[0])
	if got := keysOf(due); !slices.Equal(got, wantOrder) {
		t.Errorf("Due order = %v, want %v", got, wantOrder)
	}
	due, _ = s.Due(ctx, 2)
	if got := keysOf(due); !slices.Equal(got, wantOrder[:2]) {
		t.Errorf("Due(limit 2) = %v, want %v", got, wantOrder[:2])
	}
}

func TestDueWithBounds(t *testing.T) {
	s, clk := openTest(t)
	var keys []Key
	for i, host := range []string{"big", "small", "big", "small", "small"} {
		n := envRow(fmt.Sprintf("M%d", i), host)
		if host == "big" {
			n.Wire = bytes.Repeat([]byte("x"), 1000)
		}
		keys = append(keys, mustAdd(t, s, n)[0].Key())
		clk.Advance(time.Second)
	}
	for _, c := range []struct {
		name string
		f    DueFilter
		want []Key
	}{
		{"no bounds", DueFilter{}, keys},
		{"bytes reached after the first row", DueFilter{MaxBytes: 1000}, keys[:1]},
		{"the first row even when larger", DueFilter{MaxBytes: 10}, keys[:1]},
		{"bytes reached within", DueFilter{MaxBytes: 1001}, keys[:2]},
		{"limit first", DueFilter{Limit: 2, MaxBytes: 1 << 20}, keys[:2]},
		{"a host skipped", DueFilter{Skip: func(h string) bool { return h == "big" }}, []Key{keys[1], keys[3], keys[4]}},
		{"skipped rows count no bytes", DueFilter{MaxBytes: 1, Skip: func(h string) bool { return h == "big" }}, keys[1:2]},
	} {
		due, err := s.DueWith(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := keysOf(due); !slices.Equal(got, c.want) {
			t.Errorf("%s: DueWith = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWireIdenticalAcrossRetries(t *testing.T) {
	s, clk := openTest(t)
	n := envRow("M1", "peer")
	n.Wire = []byte(`{"v":3,"id":"M1","enc":{"epk":"AAAA","nonce":"BBBB","body":"sealed-once"}}` + "\n\x00\xff")
	orig := bytes.Clone(n.Wire)
	k := mustAdd(t, s, n)[0].Key()
	n.Wire[0] = 'X' // the caller's slice is not the stored one
	check := func(step string, got []byte) {
		t.Helper()
		if !bytes.Equal(got, orig) {
			t.Fatalf("%s: wire = %q, want %q", step, got, orig)
		}
	}
	for i := range 6 {
		due, err := s.Due(ctx, 0)
		if err != nil || len(due) != 1 {
			t.Fatalf("Due = %v, %v", due, err)
		}
		check(fmt.Sprintf("due %d", i), due[0].Wire)
		if i%3 == 2 {
			if _, err := s.MarkRejected(ctx, k, TransportRelay, "rejected:quota:target", true); err != nil {
				t.Fatal(err)
			}
		} else if _, err := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("down")); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
	claimed, err := s.Claim(ctx, 0, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	check("claim", claimed[0].Wire)
	if _, err := s.MarkRelayAccepted(ctx, k, acceptance(clk.Now(), "E1", 9)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RepushRelay(ctx, "https://relay.example", "E2"); err != nil {
		t.Fatal(err)
	}
	due, _ := s.Due(ctx, 0)
	if len(due) != 1 {
		t.Fatalf("re-push: Due = %v", keysOf(due))
	}
	check("re-push", due[0].Wire)
	check("get", mustGet(t, s, k).Wire)
}

func TestLANDeadlineExpiry(t *testing.T) {
	s, clk := openTest(t)
	r := mustAdd(t, s, envRow("M1", "peer"), receiptRow("M0", "peer"))
	if want := t0.Add(72 * time.Hour); !r[0].Deadline.Equal(want) {
		t.Fatalf("deadline = %v, want %v", r[0].Deadline, want)
	}
	if _, err := s.MarkAttemptFailed(ctx, r[0].Key(), TransportLAN, errors.New("dial tcp: connection refused")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(72*time.Hour - time.Millisecond)
	if got, err := s.Sweep(ctx, 0); err != nil || len(got) != 0 {
		t.Fatalf("Sweep 1 ms before the deadline = %v, %v; want nothing", keysOf(got), err)
	}
	if st := mustGet(t, s, r[0].Key()).State; st != StatePending {
		t.Fatalf("state before the deadline = %s", st)
	}
	clk.Advance(time.Millisecond)
	got, err := s.Sweep(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Sweep at the deadline = %v, want both rows", keysOf(got))
	}
	for _, row := range got {
		if row.State != StateExpired || row.Reason != "not delivered within 72h" || !row.EndedAt.Equal(clk.Now()) {
			t.Errorf("swept %s: state %s reason %q ended %v", row.Key(), row.State, row.Reason, row.EndedAt)
		}
	}
	if due, _ := s.Due(ctx, 0); len(due) != 0 {
		t.Errorf("expired rows still due: %v", keysOf(due))
	}
	if again, _ := s.Sweep(ctx, 0); len(again) != 0 {
		t.Errorf("second Sweep = %v, want nothing", keysOf(again))
	}
	var env Row
	for _, row := range got {
		if row.Kind == KindEnvelope {
			env = row
		}
	}
	a, ok := AlertFor(env, false)
	if !ok {
		t.Fatal("no alert for an expired envelope")
	}
	if a.Agent != "alice" || a.Subject != "Undelivered to peer: hello peer" {
		t.Errorf("alert = %q to %q", a.Subject, a.Agent)
	}
	for _, want := range []string{"not delivered within 72h", "connection refused", "M1"} {
		if !strings.Contains(a.Body, want) {
			t.Errorf("alert body lacks %q:\n%s", want, a.Body)
		}
	}
	mustCheck(t, s)
}

func TestRelayDeadlineUnconfirmed(t *testing.T) {
	s, clk := openTest(t)
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	clk.Advance(time.Hour)
	acceptedAt := clk.Now().Add(-time.Second) // the statement's own time
	r, err := s.MarkRelayAccepted(ctx, k, acceptance(acceptedAt, "E1", 1759399200000))
	if err != nil {
		t.Fatal(err)
	}
	wantDeadline := acceptedAt.Add(14*24*time.Hour + 24*time.Hour)
	if !r.Deadline.Equal(wantDeadline) || !r.AcceptedAt.Equal(acceptedAt) || r.Seq != 1759399200000 || r.Epoch != "E1" {
		t.Fatalf("accepted row: deadline %v accepted %v seq %d epoch %q; want deadline %v", r.Deadline, r.AcceptedAt, r.Seq, r.Epoch, wantDeadline)
	}
	if due, _ := s.Due(ctx, 0); len(due) != 0 {
		t.Fatalf("relay-accepted row is due: %v", keysOf(due))
	}
	// The LAN deadline no longer applies.
	clk.Advance(72 * time.Hour)
	if got, _ := s.Sweep(ctx, 0); len(got) != 0 {
		t.Fatalf("relay-accepted row swept at 72 h: %v", keysOf(got))
	}
	clk.Advance(wantDeadline.Sub(clk.Now()) - time.Millisecond)
	if got, _ := s.Sweep(ctx, 0); len(got) != 0 {
		t.Fatalf("swept 1 ms before the relay deadline")
	}
	clk.Advance(time.Millisecond)
	got, err := s.Sweep(ctx, 0)
	if err != nil || len(got) != 1 || got[0].State != StateUnconfirmed {
		t.Fatalf("Sweep at the relay deadline = %v, %v; want one unconfirmed row", got, err)
	}
	if list, _ := s.RelayAccepted(ctx, "https://relay.example"); len(list) != 0 {
		t.Errorf("unconfirmed row still listed as relay-accepted")
	}
	a, ok := AlertFor(got[0], true)
	if !ok || a.Subject != "Undelivered/unconfirmed to peer: hello peer" {
		t.Fatalf("alert = %q, %v", a.Subject, ok)
	}
	if !strings.Contains(a.Body, "older than 0.5.3") || !strings.Contains(a.Body, "no delivery confirmation") {
		t.Errorf("older-peer wording missing:\n%s", a.Body)
	}
	b, _ := AlertFor(got[0], false)
	if strings.Contains(b.Body, "older than 0.5.3") {
		t.Errorf("older-peer wording for a peer that sent receipts:\n%s", b.Body)
	}
	mustCheck(t, s)
}

func TestSettleInCallerTransaction(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "lan-peer"), envRow("M2", "relay-peer"))
	if _, err := s.MarkRelayAccepted(ctx, rows[1].Key(), acceptance(clk.Now(), "E1", 3)); err != nil {
		t.Fatal(err)
	}
	db := s.DB()
	receipts := []byte("test-receipts")

	// A failing step after Settle in the same transaction rolls both back.
	boom := errors.New("boom")
	err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(receipts)
		if err != nil {
			return err
		}
		if err := b.Put([]byte("M1"), []byte("delivered")); err != nil {
			return err
		}
		if _, _, err := s.In(tx).Settle("M1", "lan-peer"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	if st := mustGet(t, s, rows[0].Key()).State; st != StatePending {
		t.Fatalf("rolled-back settle left state %s", st)
	}

	// Both receipts and both settles commit together.
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(receipts)
		if err != nil {
			return err
		}
		ob := s.In(tx)
		for _, r := range rows {
			if err := b.Put([]byte(r.MsgID), []byte("delivered")); err != nil {
				return err
			}
			if _, _, err := ob.Settle(r.MsgID, r.Host); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if got := mustGet(t, s, r.Key()); got.State != StateDone {
			t.Errorf("%s: state %s, want done", r.Key(), got.State)
		}
	}
	if list, _ := s.RelayAccepted(ctx, "https://relay.example"); len(list) != 0 {
		t.Errorf("settled row still listed at the relay")
	}
	mustCheck(t, s)
}

func TestErrorInsideTransactionChangesNothing(t *testing.T) {
	s, _ := openTest(t)
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	before := mustGet(t, s, k)
	// Refused operations inside one transaction, then a legal one: the transaction commits
	// and only the legal change is visible.
	err := s.Update(ctx, func(ob *Tx) error {
		if _, err := ob.MarkExpired(k, ""); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("empty reason: %v", err)
		}
		if _, err := ob.Add(envRow("M1", "peer")); !errors.Is(err, ErrExists) {
			return fmt.Errorf("duplicate add: %v", err)
		}
		if _, err := ob.MarkAttemptFailed(k, TransportNone, errors.New("x")); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("no transport: %v", err)
		}
		_, err := ob.MarkAttemptFailed(k, TransportLAN, errors.New("down"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := mustGet(t, s, k)
	if after.Attempts != before.Attempts+1 || after.State != StatePending || after.Reason != "" {
		t.Errorf("row after = %+v", after)
	}
	mustCheck(t, s)
}

func TestMakeDue(t *testing.T) {
	s, clk := openTest(t)
	var a, b []Key
	for i := range 3 {
		a = append(a, mustAdd(t, s, envRow(fmt.Sprintf("A%d", i), "alpha"))[0].Key())
		b = append(b, mustAdd(t, s, envRow(fmt.Sprintf("B%d", i), "beta"))[0].Key())
	}
	for _, k := range append(slices.Clone(a), b...) {
		if _, err := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("down")); err != nil {
			t.Fatal(err)
		}
	}
	// alpha's third row is relay-accepted: not due, and a hop does not make it due.
	if _, err := s.MarkRelayAccepted(ctx, a[2], acceptance(clk.Now(), "E1", 4)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if due, _ := s.Due(ctx, 0); len(due) != 0 {
		t.Fatalf("rows due before MakeDue: %v", keysOf(due))
	}
	n, err := s.MakeDue(ctx, "alpha")
	if err != nil || n != 2 {
		t.Fatalf("MakeDue(alpha) = %d, %v; want 2", n, err)
	}
	due, _ := s.Due(ctx, 0)
	if got := keysOf(due); !slices.Equal(got, a[:2]) {
		t.Errorf("Due after MakeDue(alpha) = %v, want %v", got, a[:2])
	}
	for _, r := range due {
		if r.Attempts != 1 || !r.NextAt.Equal(clk.Now()) {
			t.Errorf("%s: attempts %d next_at %v", r.Key(), r.Attempts, r.NextAt)
		}
	}
	if n, _ := s.MakeDue(ctx, "alpha"); n != 0 {
		t.Errorf("second MakeDue(alpha) = %d, want 0 (already due)", n)
	}
	if n, _ := s.MakeDue(ctx, "nobody"); n != 0 {
		t.Errorf("MakeDue(nobody) = %d", n)
	}
	if _, err := s.MakeDue(ctx, "bad host!"); !errors.Is(err, ErrInvalid) {
		t.Errorf("MakeDue(bad host) err = %v, want ErrInvalid", err)
	}
	// "alph" is a prefix of "alpha" but a different host.
	mustAdd(t, s, envRow("C0", "alph"))
	if _, err := s.MarkAttemptFailed(ctx, Key{"C0", "alph"}, TransportLAN, errors.New("down")); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.MakeDue(ctx, "alph"); n != 1 {
		t.Errorf("MakeDue(alph) = %d, want 1", n)
	}
	mustCheck(t, s)
}

func TestRepushRelay(t *testing.T) {
	s, clk := openTest(t)
	const r1, r2 = "https://relay.example", "https://other.example"
	rows := mustAdd(t, s, envRow("M1", "p1"), envRow("M2", "p2"), envRow("M3", "p3"), envRow("M4", "p4"))
	accept := func(k Key, relay, epoch string, seq int64) {
		t.Helper()
		a := acceptance(clk.Now(), epoch, seq)
		a.Relay = relay
		if _, err := s.MarkRelayAccepted(ctx, k, a); err != nil {
			t.Fatal(err)
		}
	}
	accept(rows[0].Key(), r1, "E1", 1)
	accept(rows[1].Key(), r1, "E1", 2)
	accept(rows[2].Key(), r1, "E2", 3)
	accept(rows[3].Key(), r2, "E1", 4)
	clk.Advance(time.Minute)

	n, err := s.RepushRelay(ctx, r1, "E2")
	if err != nil || n != 2 {
		t.Fatalf("RepushRelay(r1, E2) = %d, %v; want 2", n, err)
	}
	due, _ := s.Due(ctx, 0)
	if got, want := keysOf(due), []Key{rows[0].Key(), rows[1].Key()}; !slices.Equal(got, want) {
		t.Fatalf("Due after re-push = %v, want %v", got, want)
	}
	for _, r := range due {
		if r.State != StateRelayAccepted || !r.Repush {
			t.Errorf("%s: state %s repush %v, want relay-accepted repush", r.Key(), r.State, r.Repush)
		}
	}
	if list, _ := s.RelayAccepted(ctx, r1); len(list) != 3 {
		t.Errorf("RelayAccepted(r1) = %d rows, want 3 (flagged rows stay relay-accepted)", len(list))
	}
	if n, _ := s.RepushRelay(ctx, r1, "E2"); n != 0 {
		t.Errorf("repeated RepushRelay = %d, want 0", n)
	}
	// A failed re-push backs off and stays relay-accepted.
	f, err := s.MarkAttemptFailed(ctx, rows[0].Key(), TransportRelay, errors.New("502"))
	if err != nil || f.State != StateRelayAccepted || !f.Repush || f.NextAt.IsZero() {
		t.Fatalf("failed re-push = %+v, %v", f, err)
	}
	// The new accept statement clears the flag and moves the deadline.
	clk.Advance(time.Hour)
	accept(rows[1].Key(), r1, "E2", 77)
	got := mustGet(t, s, rows[1].Key())
	if got.Repush || got.Epoch != "E2" || got.Seq != 77 || !got.Deadline.Equal(clk.Now().Add(15*24*time.Hour)) || !got.NextAt.IsZero() {
		t.Errorf("re-accepted row = repush %v epoch %q seq %d deadline %v next_at %v", got.Repush, got.Epoch, got.Seq, got.Deadline, got.NextAt)
	}
	if due, _ := s.Due(ctx, 0); !slices.Equal(keysOf(due), []Key{rows[0].Key()}) {
		t.Errorf("Due = %v, want only M1 (its backoff passed; M2 was re-accepted)", keysOf(due))
	}
	// Moving to another relay updates the relay index.
	clk.Advance(time.Hour)
	if n, _ := s.RepushRelay(ctx, r1, ""); n != 2 {
		t.Errorf("RepushRelay(r1, all) = %d, want 2 (M1 already flagged)", n)
	}
	accept(rows[2].Key(), r2, "F1", 5)
	if list, _ := s.RelayAccepted(ctx, r2); len(list) != 2 {
		t.Errorf("RelayAccepted(r2) = %d rows, want 2", len(list))
	}
	mustCheck(t, s)
}

func TestClaim(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "peer"), envRow("M2", "peer"))
	got, err := s.Claim(ctx, 1, 30*time.Second)
	if err != nil || len(got) != 1 || got[0].Key() != rows[0].Key() {
		t.Fatalf("Claim(1) = %v, %v", keysOf(got), err)
	}
	if !got[0].NextAt.Equal(clk.Now().Add(30*time.Second)) || got[0].Attempts != 0 || len(got[0].Wire) == 0 {
		t.Errorf("claimed row next_at %v attempts %d wire %d bytes", got[0].NextAt, got[0].Attempts, len(got[0].Wire))
	}
	got2, _ := s.Claim(ctx, 0, 30*time.Second)
	if len(got2) != 1 || got2[0].Key() != rows[1].Key() {
		t.Fatalf("second Claim = %v, want only M2", keysOf(got2))
	}
	if again, _ := s.Claim(ctx, 0, 30*time.Second); len(again) != 0 {
		t.Fatalf("leased rows claimed again: %v", keysOf(again))
	}
	// The outcome replaces the lease.
	if _, err := s.MarkAttemptFailed(ctx, rows[0].Key(), TransportLAN, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if again, _ := s.Due(ctx, 0); !slices.Equal(keysOf(again), []Key{rows[0].Key()}) {
		t.Errorf("Due after failure backoff = %v, want M1", keysOf(again))
	}
	// A lease that runs out makes the row due again.
	clk.Advance(25 * time.Second)
	if again, _ := s.Due(ctx, 0); len(again) != 2 {
		t.Errorf("Due after the lease = %v, want both", keysOf(again))
	}
	if _, err := s.Claim(ctx, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Claim(lease 0) err = %v, want ErrInvalid", err)
	}
	mustCheck(t, s)
}

func TestNextDue(t *testing.T) {
	s, clk := openTest(t)
	if _, ok, err := s.NextDue(ctx); ok || err != nil {
		t.Fatalf("NextDue on empty = %v, %v", ok, err)
	}
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	if at, ok, _ := s.NextDue(ctx); !ok || !at.Equal(clk.Now()) {
		t.Fatalf("NextDue = %v, %v; want now", at, ok)
	}
	r, _ := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("x"))
	if at, ok, _ := s.NextDue(ctx); !ok || !at.Equal(r.NextAt) {
		t.Fatalf("NextDue = %v, want %v", at, r.NextAt)
	}
	if _, err := s.MarkDelivered(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.NextDue(ctx); ok {
		t.Fatalf("NextDue after delivery: ok = true")
	}
}

func TestPrune(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "peer"), envRow("M2", "peer"), envRow("M3", "peer"))
	if _, err := s.MarkDelivered(ctx, rows[0].Key()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, err := s.MarkRejected(ctx, rows[1].Key(), TransportLAN, "refused", false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	n, err := s.Prune(ctx, t0.Add(time.Hour), 0)
	if err != nil || n != 1 {
		t.Fatalf("Prune(before +1h) = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, rows[0].Key()); !errors.Is(err, ErrNotFound) {
		t.Errorf("pruned row still there: %v", err)
	}
	n, err = s.Prune(ctx, clk.Now().Add(time.Hour), 0)
	if err != nil || n != 1 {
		t.Fatalf("Prune(all) = %d, %v; want 1 (the active row stays)", n, err)
	}
	if r := mustGet(t, s, rows[2].Key()); r.State != StatePending {
		t.Errorf("active row after prune: %s", r.State)
	}
	if _, err := s.Prune(ctx, time.Time{}, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Prune(zero) err = %v", err)
	}
	mustCheck(t, s)
	// A pruned key can be used again.
	mustAdd(t, s, envRow("M1", "peer"))
}

func TestRebindHost(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "peer"), envRow("M2", "peer"), envRow("M3", "peer"), envRow("M4", "other"))
	if _, err := s.MarkRelayAccepted(ctx, rows[1].Key(), acceptance(clk.Now(), "E", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkDelivered(ctx, rows[2].Key()); err != nil {
		t.Fatal(err)
	}
	nk := testKey(99)
	n, err := s.RebindHost(ctx, "peer", nk)
	if err != nil || n != 2 {
		t.Fatalf("RebindHost = %d, %v; want 2", n, err)
	}
	for i, want := range []string{nk, nk, rows[2].HostKey, rows[3].HostKey} {
		if got := mustGet(t, s, rows[i].Key()).HostKey; got != want {
			t.Errorf("row %d host key = %q, want %q", i, got, want)
		}
	}
	if _, err := s.RebindHost(ctx, "peer", "short"); !errors.Is(err, ErrInvalid) {
		t.Errorf("RebindHost(bad key) err = %v", err)
	}
	mustCheck(t, s)
}

func TestByItemAndList(t *testing.T) {
	s, clk := openTest(t)
	mustAdd(t, s, envRow("M1", "b-host"), envRow("M1", "a-host"), envRow("M11", "a-host"))
	clk.Advance(time.Second)
	mustAdd(t, s, envRow("M0", "a-host"))
	if _, err := s.MarkDelivered(ctx, Key{"M11", "a-host"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ByItem(ctx, "M1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Key{{"M1", "a-host"}, {"M1", "b-host"}}; !slices.Equal(keysOf(got), want) {
		t.Errorf("ByItem(M1) = %v, want %v", keysOf(got), want)
	}
	for _, tt := range []struct {
		f    Filter
		want []Key
	}{
		{Filter{}, []Key{{"M1", "a-host"}, {"M1", "b-host"}, {"M11", "a-host"}, {"M0", "a-host"}}},
		{Filter{Active: true}, []Key{{"M1", "a-host"}, {"M1", "b-host"}, {"M0", "a-host"}}},
		{Filter{Active: true, Host: "a-host"}, []Key{{"M1", "a-host"}, {"M0", "a-host"}}},
		{Filter{Host: "a-host"}, []Key{{"M1", "a-host"}, {"M11", "a-host"}, {"M0", "a-host"}}},
		{Filter{Limit: 2}, []Key{{"M1", "a-host"}, {"M1", "b-host"}}},
		{Filter{Host: "nobody"}, nil},
	} {
		rows, err := s.List(ctx, tt.f)
		if err != nil {
			t.Fatalf("List(%+v): %v", tt.f, err)
		}
		if got := keysOf(rows); !slices.Equal(got, tt.want) {
			t.Errorf("List(%+v) = %v, want %v", tt.f, got, tt.want)
		}
		for _, r := range rows {
			if r.Wire != nil {
				t.Errorf("List returned wire bytes")
			}
		}
	}
}

func TestRowJSON(t *testing.T) {
	s, clk := openTest(t)
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	if _, err := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("refused")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1234 * time.Millisecond)
	r, err := s.MarkRelayAccepted(ctx, k, acceptance(clk.Now(), "E1", 42))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"msg_id": "M1", "host": "peer", "state": "relay-accepted", "transport": "relay",
		"attempts": 2.0, "next_at": nil, "last_error": "", "relay": "https://relay.example",
		"epoch": "E1", "seq": 42.0, "accepted_at": "2026-10-02T10:00:01.234Z",
		"deadline": "2026-10-17T10:00:01.234Z", "kind": "envelope", "lan_failures": 1.0,
		"created_at": "2026-10-02T10:00:00.000Z",
	}
	for name, w := range want {
		if got, ok := m[name]; !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("JSON %s = %#v (present %v), want %#v", name, got, ok, w)
		}
	}
	if _, ok := m["wire"]; ok {
		t.Errorf("JSON carries wire bytes")
	}
	var back Row
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	r.Wire = nil
	if !reflect.DeepEqual(back, r) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v", back, r)
	}
}

func TestAddInvalid(t *testing.T) {
	mod := func(f func(*NewRow)) NewRow {
		n := envRow("M1", "peer")
		f(&n)
		return n
	}
	tests := []struct {
		name string
		n    NewRow
	}{
		{"no kind", mod(func(n *NewRow) { n.Kind = 0 })},
		{"bad kind", mod(func(n *NewRow) { n.Kind = 9 })},
		{"empty item", mod(func(n *NewRow) { n.ItemID = "" })},
		{"item with NUL", mod(func(n *NewRow) { n.ItemID = "M\x001" })},
		{"item with newline", mod(func(n *NewRow) { n.ItemID = "M\n1" })},
		{"item too long", mod(func(n *NewRow) { n.ItemID = strings.Repeat("M", MaxItemID+1) })},
		{"item bad utf8", mod(func(n *NewRow) { n.ItemID = "M\xff" })},
		{"envelope with receipt id", mod(func(n *NewRow) { n.ItemID = "receipt:M1:bob@peer:1" })},
		{"receipt without receipt id", mod(func(n *NewRow) { n.Kind = KindReceipt })},
		{"receipt id without msg", mod(func(n *NewRow) { n.Kind, n.ItemID = KindReceipt, "receipt::bob@peer:1" })},
		{"receipt id without rest", mod(func(n *NewRow) { n.Kind, n.ItemID = KindReceipt, "receipt:M1" })},
		{"empty host", mod(func(n *NewRow) { n.Host = "" })},
		{"host with space", mod(func(n *NewRow) { n.Host = "a b" })},
		{"host with NUL", mod(func(n *NewRow) { n.Host = "a\x00b" })},
		{"host starting with dot", mod(func(n *NewRow) { n.Host = ".peer" })},
		{"host too long", mod(func(n *NewRow) { n.Host = strings.Repeat("h", 64) })},
		{"empty host key", mod(func(n *NewRow) { n.HostKey = "" })},
		{"short host key", mod(func(n *NewRow) { n.HostKey = "AAAA" })},
		{"unpadded host key", mod(func(n *NewRow) { n.HostKey = strings.TrimSuffix(testKey(1), "=") + "A" })},
		{"url-alphabet host key", mod(func(n *NewRow) { n.HostKey = "-" + testKey(1)[1:] })},
		{"empty wire", mod(func(n *NewRow) { n.Wire = nil })},
		{"oversize wire", mod(func(n *NewRow) { n.Wire = make([]byte, MaxWire+1) })},
		{"subject with control", mod(func(n *NewRow) { n.Subject = "a\x07b" })},
		{"agent too long", mod(func(n *NewRow) { n.Agent = strings.Repeat("a", 301) })},
		{"bad transport", mod(func(n *NewRow) { n.Transport = 7 })},
	}
	s, _ := openTest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Add(ctx, tt.n)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Add err = %v, want ErrInvalid", err)
			}
		})
	}
	if rows, _ := s.List(ctx, Filter{}); len(rows) != 0 {
		t.Errorf("refused rows were stored: %v", keysOf(rows))
	}
	// Add of several rows is all or nothing.
	if _, err := s.Add(ctx, envRow("M1", "peer"), tests[0].n); !errors.Is(err, ErrInvalid) {
		t.Fatalf("mixed Add err = %v", err)
	}
	if rows, _ := s.List(ctx, Filter{}); len(rows) != 0 {
		t.Errorf("partial Add stored %v", keysOf(rows))
	}
	mustCheck(t, s)
}

func TestAddExists(t *testing.T) {
	s, _ := openTest(t)
	first := mustAdd(t, s, envRow("M1", "peer"))[0]
	n := envRow("M1", "peer")
	n.Wire = []byte("different ciphertext")
	if _, err := s.Add(ctx, n); !errors.Is(err, ErrExists) {
		t.Fatalf("second Add err = %v, want ErrExists", err)
	}
	if got := mustGet(t, s, first.Key()); !bytes.Equal(got.Wire, first.Wire) {
		t.Errorf("existing row's wire was replaced")
	}
	// The same item to another host is another row.
	mustAdd(t, s, envRow("M1", "peer2"))
}

func TestOperationInputErrors(t *testing.T) {
	s, clk := openTest(t)
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	good := acceptance(clk.Now(), "E1", 1)
	badAccept := func(f func(*Acceptance)) Acceptance { a := good; f(&a); return a }
	tests := []struct {
		name string
		err  error
		do   func() error
	}{
		{"missing row", ErrNotFound, func() error { _, err := s.MarkDelivered(ctx, Key{"M2", "peer"}); return err }},
		{"settle missing row", ErrNotFound, func() error { _, _, err := s.Settle(ctx, "M2", "peer"); return err }},
		{"get bad key", ErrInvalid, func() error { _, err := s.Get(ctx, Key{"", "peer"}); return err }},
		{"failed no transport", ErrInvalid, func() error {
			_, err := s.MarkAttemptFailed(ctx, k, TransportNone, errors.New("x"))
			return err
		}},
		{"failed nil cause", ErrInvalid, func() error {
			_, err := s.MarkAttemptFailed(ctx, k, TransportLAN, nil)
			return err
		}},
		{"failed blank cause", ErrInvalid, func() error {
			_, err := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New(" \n "))
			return err
		}},
		{"rejected empty reason", ErrInvalid, func() error {
			_, err := s.MarkRejected(ctx, k, TransportLAN, "\x00", false)
			return err
		}},
		{"accept no relay", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Relay = "" }))
			return err
		}},
		{"accept relay with NUL", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Relay = "r\x00" }))
			return err
		}},
		{"accept no epoch", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Epoch = "" }))
			return err
		}},
		{"accept seq 0", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Seq = 0 }))
			return err
		}},
		{"accept no statement", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Statement = nil }))
			return err
		}},
		{"accept no sig", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Sig = "" }))
			return err
		}},
		{"accept zero time", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.AcceptedAt = time.Time{} }))
			return err
		}},
		{"accept no retention", ErrInvalid, func() error {
			_, err := s.MarkRelayAccepted(ctx, k, badAccept(func(a *Acceptance) { a.Retention = 0 }))
			return err
		}},
		{"repush empty relay", ErrInvalid, func() error { _, err := s.RepushRelay(ctx, "", "E"); return err }},
		{"list bad host", ErrInvalid, func() error { _, err := s.List(ctx, Filter{Host: "a b"}); return err }},
		{"cancelled context", context.Canceled, func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := s.MarkDelivered(c, k)
			return err
		}},
	}
	before := mustGet(t, s, k)
	for _, tt := range tests {
		if err := tt.do(); !errors.Is(err, tt.err) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.err)
		}
	}
	if after := mustGet(t, s, k); !reflect.DeepEqual(after, before) {
		t.Errorf("refused operations changed the row")
	}
	mustCheck(t, s)
}

func TestReadOnlyAndMissingBuckets(t *testing.T) {
	s, _ := openTest(t)
	k := mustAdd(t, s, envRow("M1", "peer"))[0].Key()
	err := s.View(ctx, func(ob *Tx) error {
		if _, err := ob.MarkDelivered(k); !errors.Is(err, ErrReadOnly) {
			t.Errorf("MarkDelivered in a read-only tx: %v, want ErrReadOnly", err)
		}
		if _, err := ob.Add(envRow("M2", "peer")); !errors.Is(err, ErrReadOnly) {
			t.Errorf("Add in a read-only tx: %v, want ErrReadOnly", err)
		}
		if _, err := ob.Get(k); err != nil {
			t.Errorf("Get in a read-only tx: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A database Open never ran on.
	bare := openDB(t, false)
	s2 := &Store{db: bare, clock: time.Now, lanDeadline: DefaultLANDeadline, grace: DefaultGrace}
	if _, err := s2.Due(ctx, 0); !errors.Is(err, ErrNoBuckets) {
		t.Errorf("Due without buckets: %v, want ErrNoBuckets", err)
	}
	if _, err := s2.Add(ctx, envRow("M1", "peer")); !errors.Is(err, ErrNoBuckets) {
		t.Errorf("Add without buckets: %v, want ErrNoBuckets", err)
	}
}

func TestOpenSchema(t *testing.T) {
	db := openDB(t, false)
	if _, err := Open(db, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db, nil); err != nil {
		t.Fatalf("second Open: %v", err)
	}
	err := db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketTop).Bucket(bucketMeta).Put(metaSchema, binary.BigEndian.AppendUint64(nil, schemaVersion+1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db, nil); !errors.Is(err, ErrSchema) {
		t.Errorf("Open(newer schema) = %v, want ErrSchema", err)
	}
	if _, err := Open(nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(nil) = %v, want ErrInvalid", err)
	}
	if _, err := Open(db, &Options{LANDeadline: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(negative deadline) = %v, want ErrInvalid", err)
	}
}

func TestCheckFindsCorruption(t *testing.T) {
	tests := []struct {
		name   string
		damage func(tx *bbolt.Tx) error
	}{
		{"stray due entry", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketTop).Bucket(bucketDue).Put(timeKey(t0, rowKey(Key{"X", "peer"})), nil)
		}},
		{"missing host entry", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketTop).Bucket(bucketHost).Delete(prefixKey("peer", rowKey(Key{"M1", "peer"})))
		}},
		{"wrong host value", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketTop).Bucket(bucketHost).Put(prefixKey("peer", rowKey(Key{"M1", "peer"})), []byte{})
		}},
		{"missing wire", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketTop).Bucket(bucketWire).Delete(rowKey(Key{"M1", "peer"}))
		}},
		{"undecodable row", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketTop).Bucket(bucketRows).Put(rowKey(Key{"M1", "peer"}), []byte{9, 9})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTest(t)
			mustAdd(t, s, envRow("M1", "peer"))
			mustCheck(t, s)
			if err := s.DB().Update(tt.damage); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(ctx); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Check = %v, want ErrCorrupt", err)
			}
		})
	}
}
