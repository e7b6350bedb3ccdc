package relaylink

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// TestKeepBackoffIsJitteredCappedAndEndsWithTheContext: after failed enrolment or publication
// runs the waits double from 5 s up to keepEvery, each within ±20%, and the schedule stops when
// the daemon's context ends.
func TestKeepBackoffIsJitteredCappedAndEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	bo := keepBackoff(ctx)
	want := 5 * time.Second
	varied := false
	for i := range 20 {
		d := bo.NextBackOff()
		if d < want*8/10 || d > want*12/10 {
			t.Fatalf("wait %d = %v, want %v ±20%%", i, d, want)
		}
		varied = varied || d != want
		want = min(2*want, keepEvery)
	}
	if !varied {
		t.Fatal("no jitter in 20 waits")
	}
	bo.Reset()
	if d := bo.NextBackOff(); d > 6*time.Second {
		t.Fatalf("after a success the first wait is %v, want about 5 s", d)
	}
	cancel()
	if d := bo.NextBackOff(); d != backoff.Stop {
		t.Fatalf("after the context ended: %v, want Stop", d)
	}
}
