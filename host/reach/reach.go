// Package reach keeps what a host knows of the reachability of its transport targets: the
// relay, and each paired peer's LAN address. It is the one place that fact lives; the outbox
// scheduler (which transport a row takes), the recovery flush (rows waiting for a target become
// due when it answers again), the probes of silent targets, `status`, `outbox`, `doctor` and the
// metrics all read it here.
//
// Each target is a small state machine fed three events:
//
//   - Up: the target answered and dealt with what was sent (a delivery, a relay accept, a
//     refusal of a row, a pull, a probe answered by the right key).
//   - Quiet: the target answered but failed everything (an error status for every row): it is
//     reachable, so rows still go to it, but nothing says its waiting rows would go through now.
//   - Down: no answer at all (connection refused or reset, a timeout, a gateway that says the
//     service behind it is gone).
//
// A target starts Unknown (the daemon's memory: nothing is stored). Entering Up from any other
// state tells the OnUp hook once, with the state left and, when the target was Down at any point
// since it was last Up, how long ago that outage began: the host then makes the rows waiting for
// the target due (their backoff was set while it did not take them). Entering Down tells OnDown
// (the probes start there).
package reach

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// State is a target's reachability.
type State int

const (
	Unknown State = iota // nothing seen since the host was opened
	Up                   // answered and took what was sent
	Quiet                // answers, takes nothing
	Down                 // no answer at all
)

var stateNames = [...]string{"unknown", "up", "quiet", "down"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("state(%d)", int(s))
	}
	return stateNames[s]
}

// Target names a transport target: Relay, or LAN(host) for a peer's LAN address.
type Target string

// Relay is the pinned relay.
const Relay Target = "relay"

const lanPrefix = "lan:"

// LAN is the LAN address of the paired peer host.
func LAN(host string) Target { return Target(lanPrefix + host) }

// Peer is the peer host of a LAN target ("" and false for the relay).
func (t Target) Peer() (string, bool) { return strings.CutPrefix(string(t), lanPrefix) }

// Describe names the target for people: "relay" or "beta on the LAN".
func (t Target) Describe() string {
	if host, ok := t.Peer(); ok {
		return host + " on the LAN"
	}
	return string(t)
}

// Status is one target's state.
type Status struct {
	Target Target
	State  State
	// Since is when the target entered State (zero for Unknown).
	Since time.Time
	// Last is when the last event arrived (zero for Unknown): for Down, the last attempt or probe
	// that got no answer.
	Last time.Time
	// OutageSince is when the target went Down first since it was last Up (zero when it has not
	// been Down since): a Quiet spell between Down and Up does not end an outage.
	OutageSince time.Time
}

// Recovery is what OnUp is told: the target answers and takes again.
type Recovery struct {
	Target Target
	From   State // the state it left
	// Outage is how long ago the target went Down first since it was last Up (0 when it was not
	// Down since: it was Quiet, or Unknown since the start).
	Outage time.Duration
}

// Config are a Tracker's clock and hooks. The hooks run on the goroutine that reported the
// event, after the tracker's lock is released; they must not block for long.
type Config struct {
	Clock  func() time.Time // default time.Now
	OnUp   func(Recovery)   // a target entered Up from another state
	OnDown func(Target)     // a target entered Down
}

// Tracker holds the state of every target. The zero value is not ready: use New. Safe for
// concurrent use.
type Tracker struct {
	cfg Config

	mu      sync.Mutex
	targets map[Target]Status
}

// New returns a tracker in which every target is Unknown.
func New(cfg Config) *Tracker {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Tracker{cfg: cfg, targets: map[Target]Status{}}
}

// Up reports that t answered and took what was sent.
func (tr *Tracker) Up(t Target) { tr.event(t, Up) }

// Quiet reports that t answered but took nothing.
func (tr *Tracker) Quiet(t Target) { tr.event(t, Quiet) }

// Down reports that t gave no answer.
func (tr *Tracker) Down(t Target) { tr.event(t, Down) }

func (tr *Tracker) event(t Target, s State) {
	now := tr.cfg.Clock()
	tr.mu.Lock()
	old, known := tr.targets[t]
	if !known {
		old = Status{Target: t}
	}
	cur := old
	cur.Last = now
	if old.State != s {
		cur.State, cur.Since = s, now
	}
	switch {
	case s == Down && cur.OutageSince.IsZero():
		cur.OutageSince = now
	case s == Up:
		cur.OutageSince = time.Time{}
	}
	tr.targets[t] = cur
	tr.mu.Unlock()
	if old.State == s {
		return
	}
	switch {
	case s == Up && tr.cfg.OnUp != nil:
		r := Recovery{Target: t, From: old.State}
		if !old.OutageSince.IsZero() {
			// At least a nanosecond: an outage that began this very instant is still one.
			r.Outage = max(now.Sub(old.OutageSince), time.Nanosecond)
		}
		tr.cfg.OnUp(r)
	case s == Down && tr.cfg.OnDown != nil:
		tr.cfg.OnDown(t)
	}
}

// Forget drops what is known of t (a peer unpaired, the relay unset): it is Unknown again.
func (tr *Tracker) Forget(t Target) {
	tr.mu.Lock()
	delete(tr.targets, t)
	tr.mu.Unlock()
}

// Get is t's status (State Unknown when nothing is known).
func (tr *Tracker) Get(t Target) Status {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	st, ok := tr.targets[t]
	if !ok {
		return Status{Target: t}
	}
	return st
}

// Is reports whether t is in state s.
func (tr *Tracker) Is(t Target, s State) bool { return tr.Get(t).State == s }

// DownWithin reports whether t is Down and its last unanswered attempt is less than d before
// now: a mark that no probe keeps fresh (no daemon runs) fades, and the target is tried again.
func (tr *Tracker) DownWithin(t Target, d time.Duration) bool {
	st := tr.Get(t)
	return st.State == Down && tr.cfg.Clock().Sub(st.Last) < d
}

// All is the status of every known target, sorted by target (the relay first).
func (tr *Tracker) All() []Status {
	tr.mu.Lock()
	out := slices.Collect(maps.Values(tr.targets))
	tr.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int {
		switch {
		case a.Target == b.Target:
			return 0
		case a.Target == Relay:
			return -1
		case b.Target == Relay:
			return 1
		}
		return strings.Compare(string(a.Target), string(b.Target))
	})
	return out
}

// InState lists the targets in state s.
func (tr *Tracker) InState(s State) []Target {
	var out []Target
	for _, st := range tr.All() {
		if st.State == s {
			out = append(out, st.Target)
		}
	}
	return out
}
