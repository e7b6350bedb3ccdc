package relaylink

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/relayclient"
)

// The daemon's relay loops.
//
// Run supervises the pinned relay: while one is pinned and its key is the pinned one, it runs the
// enrolment and publications (Keep: at start, every keepEvery, and when the peers change or the
// relay refuses the host's hop) and the receiver (pull, process, ack; paused idle between empty
// pulls, or long-polling where the relay supports it). A new pin, an unset or a served key other
// than the pinned one (which stops relay use) restarts it. Pushing is the outbox loop's business
// (Pusher).

// DefaultWait is the long-poll wait the daemon's receiver asks the relay for. A relay that does
// not hold pulls answers at once, and the receiver then pauses a tick between pulls.
const DefaultWait = 25 * time.Second

// Run runs the daemon's relay loops until ctx is done: tick is the receiver's pause between
// empty pulls, wait its long-poll wait.
func (l *Link) Run(ctx context.Context, tick, wait time.Duration) {
	l.releaseAtStart()
	for ctx.Err() == nil {
		c, err := l.Conn()
		if err != nil {
			var held heldError
			switch {
			case errors.As(err, &held):
				l.log.Info("relay held", logkey.Err, err)
			case !errors.Is(err, ErrNoRelay) && !errors.Is(err, ErrRelayStopped):
				l.log.Error("relay", logkey.Err, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-l.changed:
			case <-time.After(time.Minute):
			}
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		kept := make(chan struct{}) // the first enrolment and publication run is over
		go func() {
			defer wg.Done()
			l.keepLoop(lctx, kept)
		}()
		go func() {
			defer wg.Done()
			// The receiver starts after the first keep run: a pull before the enrolment would
			// be refused and ask for a second one.
			select {
			case <-kept:
				l.receiveLoop(lctx, c, tick, wait)
			case <-lctx.Done():
			}
		}()
		l.log.Info("relay in use", logkey.Relay, c.Pin.URL, logkey.Fingerprint, c.Pin.Fingerprint())
		select {
		case <-ctx.Done():
		case <-l.changed:
		}
		cancel()
		wg.Wait()
	}
}

// keepBackoff is the schedule of Keep runs after failures (github.com/cenkalti/backoff/v4): 5 s
// doubling up to keepEvery, each ±20%, never giving up, ended by ctx.
func keepBackoff(ctx context.Context) backoff.BackOff {
	return backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(5*time.Second),
		backoff.WithMaxInterval(keepEvery),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.2),
		backoff.WithMaxElapsedTime(0)), ctx)
}

// keepLoop runs Keep at start, every keepEvery and when asked, backing off after failures. It
// closes kept when the first run is over (whatever its outcome).
func (l *Link) keepLoop(ctx context.Context, kept chan<- struct{}) {
	bo := keepBackoff(ctx)
	for {
		wait := keepEvery
		err := l.Keep(ctx, false)
		if kept != nil {
			close(kept)
			kept = nil
		}
		if err != nil && ctx.Err() == nil {
			if wait = bo.NextBackOff(); wait == backoff.Stop {
				return
			}
			l.log.Warn("relay enrolment or publication failed", logkey.RetryIn, wait, logkey.Err, err)
			// The failure itself may have asked for a run (a refused hop): the backoff comes
			// first, and the next run picks up whatever else changed meanwhile.
			select {
			case <-l.keep:
			default:
			}
		} else {
			bo.Reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-l.keep:
		case <-time.After(wait):
		}
	}
}

// pullMaxBackoff caps the receiver's pause after failed pulls: a pull is one small request, and
// the first one that succeeds after an outage flushes the rows waiting for the relay, so a relay
// that comes back is noticed within about this long (±20%). A Retry-After still counts in full.
const pullMaxBackoff = 10 * time.Second

// receiveLoop runs the receiver of c until ctx is done or the relay key changes.
func (l *Link) receiveLoop(ctx context.Context, c *Conn, tick, wait time.Duration) {
	r, err := l.Receiver(c, checkpoint.ReceiverOptions{Idle: tick, Wait: wait, MaxBackoff: pullMaxBackoff})
	if err != nil {
		l.log.Error("relay receiver", logkey.Err, err)
		return
	}
	err = r.Run(ctx)
	var kc *relayclient.KeyChangedError
	if errors.As(err, &kc) {
		l.keyChanged(c, kc)
	}
}

// releaseAtStart reprocesses quarantined items whose sender got paired while no release could run.
func (l *Link) releaseAtStart() {
	released := 0
	err := l.db.Update(func(tx *bbolt.Tx) error {
		released = 0
		senders, err := l.quar.In(tx).UnpairedSenders()
		if err != nil || len(senders) == 0 {
			return err
		}
		peers, err := l.host.Peers(tx)
		if err != nil {
			return err
		}
		for _, k := range senders {
			if _, ok := peerWithKey(peers, k); ok {
				n, err := l.ReleaseTx(tx, k)
				if err != nil {
					return err
				}
				released += n
			}
		}
		return nil
	})
	if err != nil {
		l.log.Error("releasing quarantined relay items", logkey.Err, err)
	}
	if released > 0 {
		l.host.Wake()
	}
}
