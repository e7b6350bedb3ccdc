package outbox

import (
	"errors"
	"testing"
	"time"
)

// failAll records one failed LAN attempt on each key, pushing it into backoff.
func failAll(t *testing.T, s *Store, keys ...Key) {
	t.Helper()
	for _, k := range keys {
		if _, err := s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("connection refused")); err != nil {
			t.Fatal(err)
		}
	}
}

func dueKeys(t *testing.T, s *Store) map[Key]bool {
	t.Helper()
	due, err := s.Due(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[Key]bool{}
	for _, r := range due {
		out[r.Key()] = true
	}
	return out
}

// TestRetryNowByMessage: retrying a message makes its envelope rows to every host and the
// receipt rows of that message due now, and no other row; attempts are kept.
func TestRetryNowByMessage(t *testing.T) {
	s, _ := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "beta"), envRow("M1", "gamma"), envRow("M2", "beta"),
		receiptRow("M1", "delta"), receiptRow("M10", "delta"))
	var keys []Key
	for _, r := range rows {
		keys = append(keys, r.Key())
	}
	failAll(t, s, keys...)
	if got := dueKeys(t, s); len(got) != 0 {
		t.Fatalf("due after failures: %v", got)
	}
	moved, matched, err := s.RetryNow(ctx, "M1")
	if err != nil || moved != 3 || matched != 3 {
		t.Fatalf("RetryNow(M1) = %d, %d, %v; want 3, 3", moved, matched, err)
	}
	got := dueKeys(t, s)
	for i, want := range []bool{true, true, false, true, false} { // M10's receipt is not M1's
		if got[keys[i]] != want {
			t.Errorf("%s due = %v, want %v", keys[i], got[keys[i]], want)
		}
	}
	r, _ := s.Get(ctx, keys[0])
	if r.Attempts != 1 || r.LastError != "connection refused" {
		t.Errorf("retried row: attempts %d last_error %q; want them kept", r.Attempts, r.LastError)
	}
	// Again: nothing left to move, but the message's rows are still named.
	if moved, matched, err = s.RetryNow(ctx, "M1"); err != nil || moved != 0 || matched != 3 {
		t.Fatalf("second RetryNow(M1) = %d, %d, %v; want 0, 3", moved, matched, err)
	}
	if moved, matched, err = s.RetryNow(ctx, "NOPE"); err != nil || moved != 0 || matched != 0 {
		t.Fatalf("RetryNow(unknown) = %d, %d, %v; want 0, 0", moved, matched, err)
	}
	if _, _, err = s.RetryNow(ctx, "bad\x00id"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("RetryNow(bad id) = %v, want ErrInvalid", err)
	}
	mustCheck(t, s)
}

// TestRetryNowAll: with no id every waiting row becomes due; ended and relay-accepted rows stay.
func TestRetryNowAll(t *testing.T) {
	s, clk := openTest(t)
	rows := mustAdd(t, s, envRow("M1", "beta"), envRow("M2", "beta"), envRow("M3", "gamma"), envRow("M4", "gamma"))
	failAll(t, s, rows[0].Key(), rows[1].Key())
	if _, err := s.MarkDelivered(ctx, rows[2].Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkRelayAccepted(ctx, rows[3].Key(), acceptance(clk.Now(), "E1", 3)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	moved, matched, err := s.RetryNow(ctx, "")
	if err != nil || moved != 2 || matched != 2 {
		t.Fatalf("RetryNow(all) = %d, %d, %v; want 2, 2", moved, matched, err)
	}
	if got := dueKeys(t, s); len(got) != 2 || !got[rows[0].Key()] || !got[rows[1].Key()] {
		t.Fatalf("due = %v, want M1 and M2", got)
	}
	if moved, _, err := s.RetryNow(ctx, "M3"); err != nil || moved != 0 {
		t.Fatalf("RetryNow(delivered M3) moved %d, %v", moved, err)
	}
	mustCheck(t, s)
}
