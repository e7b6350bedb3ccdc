package ops

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/outbox"
)

// Counters count, since the host was opened, the outcomes recorded per transport and the
// delivery receipts applied. Bump them after the transaction holding the change committed. The
// zero value is ready to use.
type Counters struct {
	outcomes [3][5]atomic.Int64 // [transport][outcome kind]
	receipts atomic.Int64
}

// Outcome counts one recorded outcome.
func (c *Counters) Outcome(tr outbox.Transport, k outbox.OutcomeKind) {
	if tr <= outbox.TransportRelay && k >= outbox.OutcomeDelivered && k <= outbox.OutcomeRelayAccepted {
		c.outcomes[tr][k].Add(1)
	}
}

// Receipt counts one applied delivery receipt.
func (c *Counters) Receipt() { c.receipts.Add(1) }

// OutcomeCount is how many attempts of one transport had one outcome.
type OutcomeCount struct {
	Transport string // lan or relay
	Outcome   string // delivered, relay-accepted, rejected, failed
	N         int64
}

// Snapshot is the daemon's state for metrics, read at scrape time.
type Snapshot struct {
	// Outbox counts rows by state name (every state, zeros included).
	Outbox map[string]int
	// OldestPending is when the oldest pending row was created (zero when none).
	OldestPending time.Time
	// Outcomes are the recorded attempt outcomes by transport since the host was opened.
	Outcomes []OutcomeCount
	// ReceiptsApplied counts delivery receipts applied since the host was opened.
	ReceiptsApplied int64
	// Quarantined counts the relay items held in quarantine.
	Quarantined int
	// RelayLink is the relay link's state: none (no relay pinned), stopped (the relay served
	// another key), not-enrolled, failing (an operation's last try failed) or ok.
	RelayLink string
	// RelayProblems names the relay operations whose last try failed.
	RelayProblems []string
	// Reach is each transport target's reachability (api.Reach).
	Reach []api.Reach
}

// RelayLinkStates are the values of Snapshot.RelayLink.
var RelayLinkStates = []string{"none", "stopped", "not-enrolled", "failing", "ok"}

// Ops is a host's ops view: its counters (which the host bumps), its readiness checks
// (Checker: Ready, Handler) and its state for metrics (Snapshot).
type Ops struct {
	Counters
	*Checker
	cfg Config
}

// Config is what Ops reads and checks on the host.
type Config struct {
	// Outbox is the host's outbox.
	Outbox *outbox.Store
	// RelayStatus is the host's relay status (with the quarantine count).
	RelayStatus func(ctx context.Context) (api.RelayStatus, error)
	// Serving reports whether the daemon serves the host.
	Serving func() bool
	// Write writes something small to the host's store (the readiness probe).
	Write func() error
	// Logger receives the probe's failures.
	Logger *slog.Logger
	// Reach is the host's reachability of its targets (nil: none known).
	Reach func() []api.Reach
}

// New returns the ops view of a host.
func New(cfg Config) *Ops {
	return &Ops{Checker: NewChecker(cfg.Serving, cfg.Write, cfg.Logger), cfg: cfg}
}

// Snapshot reads the daemon's state for metrics: the outbox (every row: O(rows), without wire
// bytes), the quarantine and relay status, and the counters.
func (o *Ops) Snapshot(ctx context.Context) (Snapshot, error) {
	snap := Snapshot{Outbox: map[string]int{}}
	for s := outbox.StatePending; s <= outbox.StateDone; s++ {
		snap.Outbox[s.String()] = 0
	}
	rows, err := o.cfg.Outbox.List(ctx, outbox.Filter{})
	if err != nil {
		return snap, err
	}
	for _, r := range rows {
		snap.Outbox[r.State.String()]++
		if r.State == outbox.StatePending && (snap.OldestPending.IsZero() || r.CreatedAt.Before(snap.OldestPending)) {
			snap.OldestPending = r.CreatedAt
		}
	}
	c := &o.Counters
	for _, tr := range []outbox.Transport{outbox.TransportLAN, outbox.TransportRelay} {
		for k := outbox.OutcomeDelivered; k <= outbox.OutcomeRelayAccepted; k++ {
			if tr == outbox.TransportLAN && k == outbox.OutcomeRelayAccepted {
				continue
			}
			snap.Outcomes = append(snap.Outcomes, OutcomeCount{Transport: tr.String(), Outcome: k.String(),
				N: c.outcomes[tr][k].Load()})
		}
	}
	snap.ReceiptsApplied = c.receipts.Load()
	rs, err := o.cfg.RelayStatus(ctx)
	if err != nil {
		return snap, err
	}
	snap.Quarantined = rs.Quarantined
	for _, p := range rs.Problems {
		snap.RelayProblems = append(snap.RelayProblems, p.Op)
	}
	snap.RelayLink = linkState(rs)
	if o.cfg.Reach != nil {
		snap.Reach = o.cfg.Reach()
	}
	return snap, nil
}

func linkState(rs api.RelayStatus) string {
	switch {
	case !rs.Configured:
		return "none"
	case rs.Stopped:
		return "stopped"
	case !rs.Enrolled:
		return "not-enrolled"
	case len(rs.Problems) > 0:
		return "failing"
	}
	return "ok"
}
