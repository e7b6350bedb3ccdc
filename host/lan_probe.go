package host

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/outbox"
)

// LAN probes. When an attempt to a peer over the LAN got no answer at all, its rows back off,
// each on its own schedule (up to an hour). While the daemon runs, a probe then watches the
// peer's LAN address (GET /v2/status, nothing sent but the request) on a jittered exponential
// schedule (github.com/cenkalti/backoff/v4: lanProbeFirst doubling to lanProbeMax, ±20%, ended
// by the daemon's context). When the pinned peer answers there, the rows waiting for it become
// due at once (flush.go) and the probe ends; it ends too when a delivery to the peer got through
// meanwhile, or when the peer is removed or has no address. One probe per peer at a time. A
// daemon that starts probes every peer whose rows wait after a LAN attempt (probeWaiting).
const lanProbeTimeout = 10 * time.Second

// The probe schedule (variables for tests).
var (
	lanProbeFirst = 5 * time.Second
	lanProbeMax   = 15 * time.Second
)

type lanProbes struct {
	mu      sync.Mutex
	ctx     context.Context // the daemon's loops; nil outside a daemon (no probes)
	running map[string]bool
	wg      sync.WaitGroup
}

// startProbes lets silent peers be probed until ctx ends; stopProbes waits for the probes.
func (h *Host) startProbes(ctx context.Context) {
	h.probes.mu.Lock()
	h.probes.ctx, h.probes.running = ctx, map[string]bool{}
	h.probes.mu.Unlock()
}

func (h *Host) stopProbes() {
	h.probes.mu.Lock()
	h.probes.ctx = nil
	h.probes.mu.Unlock()
	h.probes.wg.Wait()
}

// probeWaiting starts a probe for each peer with rows that wait in backoff after a LAN attempt:
// after a start nothing is known of the peers' addresses, and those rows may wait an hour.
func (h *Host) probeWaiting(ctx context.Context) {
	rows, err := h.ob.List(ctx, outbox.Filter{Active: true})
	if err != nil {
		h.log.Warn("LAN probes at start: reading the outbox", logkey.Err, err)
		return
	}
	now := h.clock()
	for _, r := range rows {
		if r.State == outbox.StatePending && r.Transport == outbox.TransportLAN && r.NextAt.After(now) {
			h.lanSilent(r.Host)
		}
	}
}

// lanSilent starts a probe of host's LAN address unless one runs (or no daemon runs).
func (h *Host) lanSilent(host string) {
	p := &h.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.running[host] {
		return
	}
	p.running[host] = true
	p.wg.Add(1)
	go func(ctx context.Context) {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			delete(p.running, host)
			p.mu.Unlock()
		}()
		h.probeLAN(ctx, host)
	}(p.ctx)
}

// lanProbeBackoff is the schedule of one peer's probes.
func lanProbeBackoff(ctx context.Context) backoff.BackOff {
	return backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(lanProbeFirst),
		backoff.WithMaxInterval(lanProbeMax),
		backoff.WithRandomizationFactor(0.2),
		backoff.WithMaxElapsedTime(0)), ctx)
}

// probeLAN probes host's address until it answers as host (then flushes its rows), or the probe
// has no reason to go on.
func (h *Host) probeLAN(ctx context.Context, host string) {
	tr, ok := h.senders[outbox.TransportLAN].(*lan.Transport)
	if !ok {
		return
	}
	link := linkOf(outbox.TransportLAN, host)
	bo := lanProbeBackoff(ctx)
	for {
		d := bo.NextBackOff()
		if d == backoff.Stop {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if h.isLinkUp(link) {
			return // a delivery got through meanwhile (and flushed)
		}
		peer, err := h.Peer(host)
		if err != nil || peer.Addr == "" {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, lanProbeTimeout)
		err = tr.Probe(pctx, outboxPeer(peer))
		cancel()
		if err != nil {
			h.log.Debug("LAN probe: no answer yet", logkey.Peer, host, logkey.RetryIn, d, logkey.Err, err)
			continue
		}
		if err := h.db.Update(func(tx *bbolt.Tx) error {
			return h.flushTx(tx, link, outbox.TransportLAN, host)
		}); err != nil && ctx.Err() == nil {
			h.log.Warn("flushing a peer's waiting outbox rows", logkey.Peer, host, logkey.Err, err)
		}
		return
	}
}
