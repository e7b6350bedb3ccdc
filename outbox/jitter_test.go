package outbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestJitteredBounds(t *testing.T) {
	d := 40 * time.Second
	for _, tt := range []struct {
		u    float64
		want time.Duration
	}{
		{0, 32 * time.Second}, {0.5, d}, {1, 48 * time.Second},
		{-3, 32 * time.Second}, {7, 48 * time.Second}, // out-of-range draws are clamped
	} {
		if got := Jittered(d, tt.u); got != tt.want {
			t.Errorf("Jittered(%v, %v) = %v, want %v", d, tt.u, got, tt.want)
		}
	}
	if got, want := LatestBackoff(10), 72*time.Minute; got != want {
		t.Errorf("LatestBackoff(10) = %v, want %v", got, want)
	}
}

// TestPersistedBackoffIsJittered fails 300 rows (with a seeded draw) at each of several attempt
// counts, by MarkAttemptFailed and by a retryable MarkRejected: every persisted wait lies within
// ±20% of the schedule, and the waits are spread, not one value.
func TestPersistedBackoffIsJittered(t *testing.T) {
	clk := newClock()
	src := rand.New(rand.NewPCG(18, 2026))
	s, err := Open(openDB(t, false), &Options{Clock: clk.Now, Jitter: src.Float64})
	if err != nil {
		t.Fatal(err)
	}
	const rows, rounds = 300, 4
	var keys []Key
	for i := range rows {
		keys = append(keys, mustAdd(t, s, envRow(fmt.Sprintf("01J%023d", i), "peer"))[0].Key())
	}
	for n := range rounds {
		waits := map[time.Duration]int{}
		lo, hi := Backoff(n)*4/5, Backoff(n)*6/5
		for i, k := range keys {
			var r Row
			if i%2 == 0 {
				r, err = s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("connection refused"))
			} else {
				r, err = s.MarkRejected(ctx, k, TransportRelay, "rejected:quota:target", true)
			}
			if err != nil {
				t.Fatal(err)
			}
			w := r.NextAt.Sub(clk.Now())
			if w < lo || w > hi {
				t.Fatalf("round %d row %d: wait %v outside [%v, %v]", n, i, w, lo, hi)
			}
			got, err := s.Get(ctx, k)
			if err != nil || !got.NextAt.Equal(r.NextAt) {
				t.Fatalf("round %d row %d: stored next_at %v (err %v), returned %v", n, i, got.NextAt, err, r.NextAt)
			}
			waits[w]++
		}
		// 300 uniform draws over a range of thousands of milliseconds: far more than 100
		// distinct values unless the draw is ignored.
		if len(waits) < 100 {
			t.Fatalf("round %d: only %d distinct waits among %d rows: %v", n, len(waits), rows, waits)
		}
		clk.Advance(hi)
	}
	mustCheck(t, s)
}
