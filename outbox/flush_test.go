package outbox

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestFlushHostInBursts: a peer answers again. Its waiting rows become due now in bursts of the
// limit, soonest first; other hosts' rows and rows already due stay as they were; attempts kept.
func TestFlushHostInBursts(t *testing.T) {
	s, clk := openTest(t)
	var beta []Key
	for i := range 5 {
		r := mustAdd(t, s, envRow(fmt.Sprintf("B%d", i), "beta"))[0]
		beta = append(beta, r.Key())
		for range i + 1 { // B0 fails once (waits 5 s), B4 five times (waits 80 s)
			if _, err := s.MarkAttemptFailed(ctx, r.Key(), TransportLAN, errors.New("refused")); err != nil {
				t.Fatal(err)
			}
		}
	}
	gamma := mustAdd(t, s, envRow("G1", "gamma"))[0].Key()
	failAll(t, s, gamma)
	fresh := mustAdd(t, s, envRow("B9", "beta"))[0].Key() // due already

	clk.Advance(time.Second)
	n, err := s.Flush(ctx, FlushFilter{Host: "beta", Limit: 2})
	if err != nil || n != 2 {
		t.Fatalf("Flush(beta, 2) = %d, %v; want 2", n, err)
	}
	due := dueKeys(t, s)
	if len(due) != 3 || !due[beta[0]] || !due[beta[1]] || !due[fresh] {
		t.Fatalf("due after the first burst = %v, want B0, B1 (soonest) and B9", due)
	}
	if n, err = s.Flush(ctx, FlushFilter{Host: "beta"}); err != nil || n != 3 {
		t.Fatalf("second Flush(beta) = %d, %v; want the other 3", n, err)
	}
	due = dueKeys(t, s)
	if len(due) != 6 || due[gamma] {
		t.Fatalf("due = %v, want every beta row and not gamma's", due)
	}
	if r, _ := s.Get(ctx, beta[4]); r.Attempts != 5 {
		t.Fatalf("flushed row has %d attempts, want 5 kept", r.Attempts)
	}
	if _, err := s.Flush(ctx, FlushFilter{Host: "bad host"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Flush(bad host) = %v, want ErrInvalid", err)
	}
	mustCheck(t, s)
}

// TestFlushRelayRows: the relay answers again: the rows whose last attempt went to the relay
// become due, whatever their host; rows that failed over the LAN keep their backoff.
func TestFlushRelayRows(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "beta"), envRow("M2", "gamma"), envRow("M3", "gamma"))
	for i, tr := range []Transport{TransportRelay, TransportRelay, TransportLAN} {
		if _, err := s.MarkAttemptFailed(ctx, rows[i].Key(), tr, errors.New("relay down")); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second)
	n, err := s.Flush(ctx, FlushFilter{Transport: TransportRelay, Limit: 100})
	if err != nil || n != 2 {
		t.Fatalf("Flush(relay) = %d, %v; want 2", n, err)
	}
	if due := dueKeys(t, s); len(due) != 2 || !due[rows[0].Key()] || !due[rows[1].Key()] {
		t.Fatalf("due = %v, want M1 and M2", due)
	}
	if n, _ := s.Flush(ctx, FlushFilter{Transport: TransportRelay}); n != 0 {
		t.Fatalf("a second flush moved %d rows", n)
	}
	mustCheck(t, s)
}

// TestPostpone: a link pause moves a waiting row's next_at and note without counting an attempt;
// rows not waiting to be sent and times in the past are refused, changing nothing.
func TestPostpone(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "beta"), envRow("M2", "beta"))
	failAll(t, s, rows[0].Key())
	until := clk.Now().Add(30 * time.Second)
	r, err := s.postponeTx(rows[0].Key(), until, "relay paused")
	if err != nil || r.Attempts != 1 || r.LANFailures != 1 || !r.NextAt.Equal(until) || r.LastError != "relay paused" {
		t.Fatalf("Postpone = %+v, %v; want 1 attempt kept, next_at %v, the note", r, err, until)
	}
	if _, err := s.postponeTx(rows[1].Key(), clk.Now().Add(-time.Second), "x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Postpone into the past = %v, want ErrInvalid", err)
	}
	if _, err := s.MarkDelivered(ctx, rows[1].Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.postponeTx(rows[1].Key(), until, "x"); !errors.Is(err, ErrTransition) {
		t.Fatalf("Postpone of a done row = %v, want ErrTransition", err)
	}
	mustCheck(t, s)
}

// postponeTx runs Tx.Postpone in a transaction of its own.
func (s *Store) postponeTx(k Key, until time.Time, note string) (Row, error) {
	return update(ctx, s, func(t *Tx) (Row, error) { return t.Postpone(k, until, note) })
}
