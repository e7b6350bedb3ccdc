package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/inbox"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/relayclient"
)

// The daemon's relay loops.
//
// runRelay supervises the pinned relay: while one is pinned and its key is the pinned one, it
// runs the enrolment and publications (relayKeep: at start, every relayKeepEvery, and when the
// peers change or the relay refuses this host's hop) and the receiver (pull, process, ack; paused
// idle between empty pulls, or long-polling where the relay supports it). A new pin, an unset or
// a served key other than the pinned one (which stops relay use) restarts it. Pushing is the
// outbox loop's business (relaylink.Pusher).

// DefaultRelayWait is the long-poll wait the daemon's receiver asks the relay for. A relay that
// does not hold pulls answers at once, and the receiver then pauses a tick between pulls.
const DefaultRelayWait = 25 * time.Second

// runRelay runs until ctx is done.
func (h *Host) runRelay(ctx context.Context, tick, wait time.Duration) {
	h.releaseAtStart()
	for ctx.Err() == nil {
		l, err := h.relayLink()
		if err != nil {
			if !errors.Is(err, ErrNoRelay) && !errors.Is(err, ErrRelayStopped) {
				h.log.Error("relay", logkey.Err, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-h.rl.changed:
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
			h.keepLoop(lctx, kept)
		}()
		go func() {
			defer wg.Done()
			// The receiver starts after the first keep run: a pull before the enrolment would
			// be refused and ask for a second one.
			select {
			case <-kept:
				h.receiveLoop(lctx, l, tick, wait)
			case <-lctx.Done():
			}
		}()
		h.log.Info("relay in use", logkey.Relay, l.pin.URL, logkey.Fingerprint, l.pin.Fingerprint())
		select {
		case <-ctx.Done():
		case <-h.rl.changed:
		}
		cancel()
		wg.Wait()
	}
}

// keepLoop runs relayKeep at start, every relayKeepEvery and when asked, backing off after
// failures. It closes kept when the first run is over (whatever its outcome).
func (h *Host) keepLoop(ctx context.Context, kept chan<- struct{}) {
	backoff := time.Duration(0)
	for {
		wait := relayKeepEvery
		err := h.relayKeep(ctx, false)
		if kept != nil {
			close(kept)
			kept = nil
		}
		if err != nil && ctx.Err() == nil {
			backoff = min(max(2*backoff, 5*time.Second), relayKeepEvery)
			wait = backoff
			h.log.Warn("relay enrolment or publication failed", logkey.RetryIn, wait, logkey.Err, err)
			// The failure itself may have asked for a run (a refused hop): the backoff comes
			// first, and the next run picks up whatever else changed meanwhile.
			select {
			case <-h.rl.keep:
			default:
			}
		} else {
			backoff = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-h.rl.keep:
		case <-time.After(wait):
		}
	}
}

// receiveLoop runs the receiver of l until ctx is done or the relay key changes.
func (h *Host) receiveLoop(ctx context.Context, l *relayLink, tick, wait time.Duration) {
	r, err := h.relayReceiver(l, inbox.ReceiverOptions{Idle: tick, Wait: wait, MaxBackoff: time.Minute})
	if err != nil {
		h.log.Error("relay receiver", logkey.Err, err)
		return
	}
	err = r.Run(ctx)
	var kc *relayclient.KeyChangedError
	if errors.As(err, &kc) {
		h.relayKeyChanged(l, kc)
	}
}

// releaseAtStart reprocesses quarantined items whose sender got paired while no release could run.
func (h *Host) releaseAtStart() {
	released := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		released = 0
		senders, err := h.quar.In(tx).UnpairedSenders()
		if err != nil || len(senders) == 0 {
			return err
		}
		peers, err := peersTx(tx)
		if err != nil {
			return err
		}
		for _, k := range senders {
			if _, ok := peerWithKey(peers, k); ok {
				n, err := h.releaseQuarantineTx(tx, k)
				if err != nil {
					return err
				}
				released += n
			}
		}
		return nil
	})
	if err != nil {
		h.log.Error("releasing quarantined relay items", logkey.Err, err)
	}
	if released > 0 {
		h.Wake()
	}
}
