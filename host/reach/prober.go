package reach

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Probes of silent targets. While the daemon runs, a target that is Down (or Unknown, when the
// host asks: rows left waiting for it at a start) is probed by one loop of its own: a cheap
// request (the host's Probe: a LAN status request, or a relay pull brought forward), at most
// Every apart, each wait drawn at random in [Every·(1−Jitter), Every] so that hosts that lost the
// same relay do not come back in step. The probe reports what it saw to the tracker; the loop
// ends when the target is neither Down nor Unknown, when Probe says there is nothing to probe,
// or when the daemon stops.

// DefaultEvery is the longest wait between two probes of a target.
const DefaultEvery = 5 * time.Second

// DefaultJitter is the share of Every drawn off each wait at random.
const DefaultJitter = 0.3

// ProberConfig is what a Prober needs.
type ProberConfig struct {
	Tracker *Tracker
	// Probe probes t once and reports the outcome to the tracker (Up, Quiet or Down). It
	// returns false when t has nothing to probe (a peer unpaired or without an address, no
	// relay in use): the loop then ends.
	Probe func(ctx context.Context, t Target) bool
	// Every and Jitter set the waits (defaults DefaultEvery, DefaultJitter).
	Every  time.Duration
	Jitter float64
	// Rand draws uniformly in [0, 1) (default math/rand/v2).
	Rand func() float64
}

// Prober runs the probe loops of silent targets between Start and Stop.
type Prober struct {
	cfg ProberConfig

	mu      sync.Mutex
	ctx     context.Context // nil outside Start..Stop: Watch does nothing
	cancel  context.CancelFunc
	running map[Target]chan struct{}
	wg      sync.WaitGroup
}

// NewProber returns a Prober; it probes nothing until Start.
func NewProber(cfg ProberConfig) *Prober {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Jitter <= 0 || cfg.Jitter >= 1 {
		cfg.Jitter = DefaultJitter
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Prober{cfg: cfg}
}

// Start lets Watch start probe loops until ctx ends or Stop.
func (p *Prober) Start(ctx context.Context) {
	p.mu.Lock()
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.running = map[Target]chan struct{}{}
	p.mu.Unlock()
}

// Stop ends the probing and waits for the loops.
func (p *Prober) Stop() {
	p.mu.Lock()
	cancel := p.cancel
	p.ctx, p.cancel = nil, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
}

// Watch starts a probe loop for t unless one runs (or the prober is not started).
func (p *Prober) Watch(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.running[t] != nil {
		return
	}
	poke := make(chan struct{}, 1)
	p.running[t] = poke
	p.wg.Add(1)
	go func(ctx context.Context) {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			delete(p.running, t)
			p.mu.Unlock()
		}()
		p.loop(ctx, t, poke)
	}(p.ctx)
}

// Poke makes t's probe loop, if one runs, probe now instead of at the end of its wait (the
// target was heard from another way: a peer's request came in over the LAN).
func (p *Prober) Poke(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.running[t]; c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// wait is the next pause: uniform in [Every·(1−Jitter), Every].
func (p *Prober) wait() time.Duration {
	lo := float64(p.cfg.Every) * (1 - p.cfg.Jitter)
	return time.Duration(lo + p.cfg.Rand()*(float64(p.cfg.Every)-lo))
}

func (p *Prober) loop(ctx context.Context, t Target, poke <-chan struct{}) {
	timer := time.NewTimer(p.wait())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-poke:
		}
		if s := p.cfg.Tracker.Get(t).State; s != Down && s != Unknown {
			return
		}
		if !p.cfg.Probe(ctx, t) {
			return
		}
		if s := p.cfg.Tracker.Get(t).State; s != Down && s != Unknown {
			return
		}
		timer.Stop()
		select { // a poke that came during the probe is spent by it
		case <-poke:
		default:
		}
		timer.Reset(p.wait())
	}
}

// Running reports whether a probe loop runs for t.
func (p *Prober) Running(t Target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running[t] != nil
}
