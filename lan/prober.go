package lan

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/outbox"
)

// Probes of silent peers. When an attempt to a peer over the LAN got no answer at all, its rows
// back off, each on its own schedule (up to an hour). While the daemon runs, a probe then watches
// the peer's LAN address (Transport.Probe: GET /v2/status, nothing sent but the request) on a
// jittered exponential schedule (ProbeSchedule, ±20%, ended by the daemon's context). When the
// pinned peer answers there, the host makes the rows waiting for it due at once (Answered) and
// the probe ends; it ends too when a delivery to the peer got through meanwhile (Up), or when the
// peer is removed or has no address. One probe per peer at a time.

// ProbeTimeout bounds one probe request.
const ProbeTimeout = 10 * time.Second

// ProbeSchedule is the schedule of one peer's probes: the first wait, doubling up to Max.
type ProbeSchedule struct{ First, Max time.Duration }

// DefaultProbeSchedule is the schedule in production.
var DefaultProbeSchedule = ProbeSchedule{First: 5 * time.Second, Max: 15 * time.Second}

// ProberConfig is what a Prober reads and calls on the host.
type ProberConfig struct {
	Transport *Transport
	// Peer is the peer pinned as host (ok false when none is).
	Peer func(host string) (p outbox.Peer, ok bool, err error)
	// Up reports whether a delivery to host got through meanwhile (the probe then ends).
	Up func(host string) bool
	// Answered is called when host answered its probe: its waiting rows become due.
	Answered func(ctx context.Context, host string)
	// Schedule is the probes' schedule (zero: DefaultProbeSchedule).
	Schedule ProbeSchedule
	Clock    func() time.Time
	Logger   *slog.Logger
}

// Prober runs the probes of silent peers while the daemon runs (Start to Stop).
type Prober struct {
	cfg ProberConfig

	mu      sync.Mutex
	ctx     context.Context // the daemon's loops; nil outside a daemon (no probes)
	running map[string]bool
	wg      sync.WaitGroup
}

// NewProber returns a Prober; it probes nothing until Start.
func NewProber(cfg ProberConfig) *Prober {
	if cfg.Schedule == (ProbeSchedule{}) {
		cfg.Schedule = DefaultProbeSchedule
	}
	return &Prober{cfg: cfg}
}

// Start lets silent peers be probed until ctx ends; Stop waits for the probes.
func (p *Prober) Start(ctx context.Context) {
	p.mu.Lock()
	p.ctx, p.running = ctx, map[string]bool{}
	p.mu.Unlock()
}

// Stop ends the probing (with the context given to Start) and waits for the probes.
func (p *Prober) Stop() {
	p.mu.Lock()
	p.ctx = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// Waiting starts a probe for each peer with rows that wait in backoff after a LAN attempt:
// after a start nothing is known of the peers' addresses, and those rows may wait an hour.
func (p *Prober) Waiting(ctx context.Context, ob *outbox.Store) {
	rows, err := ob.List(ctx, outbox.Filter{Active: true})
	if err != nil {
		p.cfg.Logger.Warn("LAN probes at start: reading the outbox", logkey.Err, err)
		return
	}
	now := p.cfg.Clock()
	for _, r := range rows {
		if r.State == outbox.StatePending && r.Transport == outbox.TransportLAN && r.NextAt.After(now) {
			p.Silent(r.Host)
		}
	}
}

// Silent starts a probe of host's LAN address unless one runs (or no daemon runs).
func (p *Prober) Silent(host string) {
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
		p.probe(ctx, host)
	}(p.ctx)
}

func (p *Prober) backoff(ctx context.Context) backoff.BackOff {
	return backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.cfg.Schedule.First),
		backoff.WithMaxInterval(p.cfg.Schedule.Max),
		backoff.WithMultiplier(2), // the library's default is 1.5
		backoff.WithRandomizationFactor(0.2),
		backoff.WithMaxElapsedTime(0)), ctx)
}

// probe probes host's address until it answers as host (then Answered), or the probe has no
// reason to go on.
func (p *Prober) probe(ctx context.Context, host string) {
	bo := p.backoff(ctx)
	for {
		d := bo.NextBackOff()
		if d == backoff.Stop || !sleep(ctx, d) {
			return
		}
		if p.cfg.Up(host) {
			return // a delivery got through meanwhile (and flushed)
		}
		peer, ok, err := p.cfg.Peer(host)
		if err != nil || !ok || peer.Addr == "" {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		err = p.cfg.Transport.Probe(pctx, peer)
		cancel()
		if err != nil {
			p.cfg.Logger.Debug("LAN probe: no answer yet", logkey.Peer, host, logkey.RetryIn, d, logkey.Err, err)
			continue
		}
		p.cfg.Answered(ctx, host)
		return
	}
}
