package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// busyRelay answers each long poll at once with an empty page carrying a retry hint, as a relay
// whose parked polls are full does; it cancels the run after stopAfter pulls.
type busyRelay struct {
	*memRelay
	hint      time.Duration
	stopAfter int
	cancel    context.CancelFunc
}

func (b *busyRelay) Pull(ctx context.Context, r PullRequest) (mbx.PullResponse, error) {
	p, err := b.memRelay.Pull(ctx, r)
	if err == nil && len(p.Items) == 0 {
		p.RetryAfter = b.hint
	}
	if len(b.memRelay.pulls) >= b.stopAfter {
		b.cancel()
	}
	return p, err
}

// TestReceiverJittersAfterARetryHint: a long poll the relay did not hold (its answer carries a
// retry hint) is followed by a pause of the hint to twice the hint, at random, so that hosts turned
// away together come back spread out; a hint longer than MaxBackoff is cut to it; an ordinary
// empty page without a hint still gets the idle pause.
func TestReceiverJittersAfterARetryHint(t *testing.T) {
	for _, tc := range []struct {
		hint, maxBackoff, lo time.Duration
	}{
		{10 * time.Second, 0, 10 * time.Second},
		{time.Hour, time.Minute, time.Minute}, // a hostile relay cannot silence the host for long
	} {
		s := openStore(t, "")
		m := &memRelay{epoch: "ep1"}
		ctx, cancel := context.WithCancel(context.Background())
		sl := &sleeper{stop: func(int, time.Duration) bool { return false }, cancel: cancel}
		br := &busyRelay{memRelay: m, hint: tc.hint, stopAfter: 40, cancel: cancel}
		r, err := s.NewReceiver(relayURL, br, &mailbox{}, &ReceiverOptions{Wait: 20 * time.Second, MaxBackoff: tc.maxBackoff,
			Sleep: sl.sleep, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		cancel()
		if len(sl.pauses) < 39 {
			t.Fatalf("hint %v: %d pauses, want one after each pull", tc.hint, len(sl.pauses))
		}
		distinct := map[time.Duration]bool{}
		for _, p := range sl.pauses {
			if p < tc.lo || p >= 2*tc.lo {
				t.Fatalf("hint %v: pause %v outside [%v, %v)", tc.hint, p, tc.lo, 2*tc.lo)
			}
			distinct[p] = true
		}
		// 39 draws from a range of nanoseconds: equal draws mean no jitter at all.
		if len(distinct) < len(sl.pauses)/2 {
			t.Fatalf("hint %v: pauses %v are not spread", tc.hint, sl.pauses)
		}
	}
	// Without a hint: the idle pause, as before.
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sl := &sleeper{stop: func(int, time.Duration) bool { return false }, cancel: cancel}
	br := &busyRelay{memRelay: m, stopAfter: 3, cancel: cancel}
	r, err := s.NewReceiver(relayURL, br, &mailbox{}, &ReceiverOptions{Sleep: sl.sleep, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	for _, p := range sl.pauses {
		if p != DefaultIdle {
			t.Fatalf("pauses %v, want the idle pause", sl.pauses)
		}
	}
}
