package host

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// Why an outbox row waits, in plain words (api.OutboxRow.Waiting). A row's last error says what
// its last attempt met, which can mislead: a row for a peer with no LAN address, tried over the
// LAN because the relay is stopped, shows "no LAN address known". What the host knows of its
// links says more: whether a daemon runs at all, the relay's state and recorded problems, a pause
// the relay asked for, and which peers' LAN addresses stopped answering (and since when).

// waitFacts is what the host knows of its links when it lists the outbox.
type waitFacts struct {
	now    time.Time
	daemon bool            // a daemon serves this host: only it sends
	relay  api.RelayStatus // the relay link: configured, stopped, enrolled and its problems
	paused time.Time       // pushes to the relay wait until then (zero: no pause)
	// lanDown holds the peers whose LAN address gave no answer to any attempt since it last
	// did, and since when (the daemon's memory: empty after a start until an attempt fails).
	lanDown map[string]time.Time
	peers   map[string]PeerRecord // the pinned peers
}

// waitReason says why an active row waits; "" for an ended row.
func waitReason(r outbox.Row, f waitFacts) string {
	if !r.State.Active() {
		return ""
	}
	if r.State == outbox.StateRelayAccepted && !r.Repush {
		return fmt.Sprintf("the relay holds it since %s; waiting for %s's delivery receipt", mbx.ISOTime(r.AcceptedAt), r.Host)
	}
	if !r.RelayV1At.IsZero() && r.State == outbox.StatePending {
		why := fmt.Sprintf("the v1 relay %s said at %s that it stored it, unsigned: waiting for %s's delivery receipt", r.Relay, mbx.ISOTime(r.RelayV1At), r.Host)
		if r.LastError != "" {
			why += " (last attempt: " + r.LastError + ")"
		}
		return why + strings.Replace(nextAttempt(r, f.now), "next attempt", "sent again", 1)
	}
	if !r.LANUnsignedAt.IsZero() && r.State == outbox.StatePending {
		why := fmt.Sprintf("%s said over the LAN at %s that it stored it, unsigned (a host that cannot sign, such as 0.5.x): waiting for its delivery receipt", r.Host, mbx.ISOTime(r.LANUnsignedAt))
		if r.LastError != "" {
			why += " (last attempt: " + r.LastError + ")"
		}
		return why + strings.Replace(nextAttempt(r, f.now), "next attempt", "sent again", 1)
	}
	p, pinned := f.peers[r.Host]
	switch {
	case !pinned:
		return fmt.Sprintf("%s is no longer paired: nothing goes to it until it is pinned again", r.Host)
	case !f.daemon:
		return "no daemon is running: it leaves when `agentmbx daemon` starts"
	}
	relayRoute := r.Repush || p.Addr == "" || r.Transport == outbox.TransportRelay
	if f.relay.Configured && relayRoute && f.paused.After(f.now) {
		return fmt.Sprintf("the relay asked this host to slow down: pushes wait until %s (no attempt is counted)", mbx.ISOTime(f.paused))
	}
	if p.Addr == "" || r.Repush {
		if !f.relay.Configured {
			return "no LAN address known for " + r.Host + " and no relay set (`agentmbx relay set`, or pin its card with an address)"
		}
		if why := relayDown(f.relay); why != "" {
			return why
		}
	}
	if since, down := f.lanDown[r.Host]; down {
		why := fmt.Sprintf("%s unreachable on the LAN (%s) since %s", r.Host, p.Addr, mbx.ISOTime(since))
		if rd := relayDown(f.relay); rd != "" {
			why += "; " + rd
		} else if !f.relay.Configured {
			why += "; no relay is set to go around it"
		}
		return why + nextAttempt(r, f.now)
	}
	if q, ok := strings.CutPrefix(r.LastError, mbx.StatusRejectedPrefix+"quota"); ok {
		return "over a quota at the relay (quota" + q + ")" + nextAttempt(r, f.now)
	}
	if r.LastError != "" {
		return "last attempt failed: " + r.LastError + nextAttempt(r, f.now)
	}
	return strings.TrimPrefix(nextAttempt(r, f.now), "; ")
}

// relayDown says why the relay set cannot take rows now ("" when it can, as far as the host
// knows, or when none is set): use stopped by a key change, failing, or no enrolment yet.
func relayDown(st api.RelayStatus) string {
	switch {
	case !st.Configured:
		return ""
	case st.Stopped:
		return "relay use stopped: the relay served another key (`agentmbx relay status`; `agentmbx relay set` with the new key resumes)"
	}
	for _, p := range st.Problems {
		if p.Op == "push" || p.Op == "enrol" || p.Op == "info" {
			return fmt.Sprintf("the relay is failing since %s (%s: %s)", p.At, p.Op, p.Error)
		}
	}
	if !st.Enrolled {
		return "not enrolled at the relay yet"
	}
	return ""
}

// nextAttempt is "; next attempt at T", "; due now" or "" for a row that never waited.
func nextAttempt(r outbox.Row, now time.Time) string {
	switch {
	case r.NextAt.IsZero():
		return ""
	case !r.NextAt.After(now):
		return "; due now"
	}
	return "; next attempt at " + mbx.ISOTime(r.NextAt)
}

// waitFacts gathers what the host knows of its links now. It reads the relay record and the
// peers (one small transaction each); callers gather it only for pages with active rows.
func (h *Host) waitFacts() (waitFacts, error) {
	now := h.clock()
	f := waitFacts{now: now, lanDown: map[string]time.Time{}, peers: map[string]PeerRecord{}}
	for _, st := range h.reach.All() {
		if host, ok := st.Target.Peer(); ok && st.State == reach.Down {
			f.lanDown[host] = st.Since
		}
	}
	h.mu.Lock()
	f.daemon = h.daemon
	h.mu.Unlock()
	rec, err := h.relay.Record()
	if err != nil {
		return f, err
	}
	if rec != nil {
		f.relay = api.RelayStatus{Configured: true, Stopped: rec.KeyChange != nil,
			Enrolled: rec.Enrolled.EnrolledFor(rec.Pin(), rec.Epoch, h.key.PublicKey())}
		for _, op := range slices.Sorted(maps.Keys(rec.Problems)) {
			f.relay.Problems = append(f.relay.Problems, rec.Problems[op])
		}
	}
	if until, paused := h.relay.Paused(now); paused {
		f.paused = until
	}
	peers, err := h.peerRecords()
	for _, p := range peers {
		f.peers[p.Host] = p
	}
	return f, err
}

// withWaiting lists rows as api.OutboxRow, with the wait reason of the active ones.
func (h *Host) withWaiting(rows []outbox.Row) ([]api.OutboxRow, error) {
	out := make([]api.OutboxRow, 0, len(rows))
	var f *waitFacts
	for _, r := range rows {
		a := apiRow(r)
		if r.State.Active() {
			if f == nil {
				facts, err := h.waitFacts()
				if err != nil {
					return nil, err
				}
				f = &facts
			}
			a.Waiting = waitReason(r, *f)
		}
		out = append(out, a)
	}
	return out, nil
}
