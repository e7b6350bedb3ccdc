package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relaylink"
)

// Reachability drives the queue (package reach). Every attempt's outcomes, every relay pull and
// every probe report to the host's one tracker whether the target answered: the relay, or a
// peer's LAN address. While a target is Down, the daemon probes it (reach.Prober: at most every
// 5 s, jittered). When it answers and takes again after an outage (or for the first time since
// the start, or after it failed everything), every row waiting for it becomes due at once, in bursts of flushBurst rows a
// transaction, and the outbox loop sends them (the relay's through its pacer); one line says so:
// "relay reachable again after 20s; sending 37 rows". The outcomes of an attempt are reported
// before they are recorded, so the flush never touches the rows of that attempt (they are due,
// not waiting): a row that failed there keeps the backoff its record gives it.

// probeEvery is the longest wait between two probes of a target that does not answer (a
// variable for tests).
var probeEvery = reach.DefaultEvery

// flushBurst bounds the rows one flush transaction makes due.
const flushBurst = 500

// targetOf is the reach target of a transport to host.
func targetOf(tr outbox.Transport, host string) reach.Target {
	if tr == outbox.TransportRelay {
		return reach.Relay
	}
	return reach.LAN(host)
}

// observe reports what an attempt's outcomes show of its target: a row dealt with (delivered,
// relay-accepted, stored by a v1 relay, or refused for what it is) is Up; no answer for any row
// is Down; answers that failed every row are Quiet.
func (h *Host) observe(tr outbox.Transport, host string, out []outbox.Outcome) {
	if len(out) == 0 {
		return
	}
	t := targetOf(tr, host)
	silent := true
	for _, o := range out {
		switch o.Kind {
		case outbox.OutcomeDelivered, outbox.OutcomeRelayAccepted, outbox.OutcomeRelaySentV1, outbox.OutcomeRejected:
			h.reach.Up(t)
			return
		}
		if !o.Unreachable {
			silent = false
		}
	}
	if silent {
		h.reach.Down(t)
	} else {
		h.reach.Quiet(t)
	}
}

// relayReached is told the outcome of each relay pull (relaylink.Host.Reached).
func (h *Host) relayReached(ctx context.Context, err error) {
	switch {
	case err == nil:
		h.reach.Up(reach.Relay)
	case ctx.Err() != nil:
	case relaylink.NoAnswer(err):
		h.reach.Down(reach.Relay)
	default:
		h.reach.Quiet(reach.Relay)
	}
}

// recovered is the tracker's OnUp: the rows waiting for the target become due now, and the
// outbox loop is woken.
func (h *Host) recovered(r reach.Recovery) {
	n, err := h.flushTarget(r.Target)
	if err != nil {
		h.log.Warn("making the rows waiting for a target due", logkey.Link, string(r.Target), logkey.Err, err)
	}
	switch {
	case r.Outage > 0:
		h.log.Info(fmt.Sprintf("%s reachable again after %s; sending %d rows", r.Target.Describe(), r.Outage.Round(time.Second), n),
			logkey.Link, string(r.Target), logkey.Count, n)
	case n > 0:
		h.log.Info(fmt.Sprintf("%s answers again; sending %d waiting rows", r.Target.Describe(), n),
			logkey.Link, string(r.Target), logkey.Count, n)
	}
	if n > 0 {
		h.kickOutbox()
	}
	if r.Target == reach.Relay && r.Outage > 0 {
		// A push may have noticed the return while the receiver still waits out its backoff:
		// what the relay holds for this host is pulled now too.
		h.relay.PullNow()
	}
}

// flushTarget makes the rows waiting for target due: a peer's rows, or for the relay the rows
// whose last attempt went to the relay and the rows of peers whose LAN address is down (they go
// to the relay next). It returns how many rows it moved.
func (h *Host) flushTarget(t reach.Target) (int, error) {
	filters := []outbox.FlushFilter{}
	if host, ok := t.Peer(); ok {
		filters = append(filters, outbox.FlushFilter{Host: host, Limit: flushBurst})
	} else {
		filters = append(filters, outbox.FlushFilter{Transport: outbox.TransportRelay, Limit: flushBurst})
		for _, d := range h.reach.InState(reach.Down) {
			if host, ok := d.Peer(); ok {
				filters = append(filters, outbox.FlushFilter{Host: host, Transport: outbox.TransportLAN, Limit: flushBurst})
			}
		}
	}
	total := 0
	for _, f := range filters {
		for {
			n := 0
			if err := h.db.Update(func(tx *bbolt.Tx) error {
				var err error
				n, err = h.ob.In(tx).Flush(f)
				return err
			}); err != nil {
				return total, err
			}
			total += n
			if n < flushBurst {
				break
			}
		}
	}
	return total, nil
}

// probeTarget probes t once for the daemon's prober (reach.ProberConfig.Probe): the relay by
// asking for its info (relaylink.Link.Probe; a v1 relay by a pull brought forward, whose outcome
// relayReached hears), a peer by a LAN status request that its pinned key must answer.
func (h *Host) probeTarget(ctx context.Context, t reach.Target) bool {
	host, isPeer := t.Peer()
	if !isPeer {
		ok, err := h.relay.Probe(ctx)
		switch {
		case !ok: // no relay in use (unset, stopped, held by a rotation): nothing to show
			h.reach.Forget(reach.Relay)
		case errors.Is(err, relaylink.ErrProbedByPull):
		case err != nil:
			h.log.Debug("relay probe: no answer yet", logkey.Err, err)
			h.relayReached(ctx, err)
		default:
			h.relayReached(ctx, nil)
		}
		return ok
	}
	p, ok, err := lanHost{h}.Peer(host)
	if err != nil || !ok || p.Addr == "" {
		h.reach.Forget(t)
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, lan.ProbeTimeout)
	err = h.lanTransport.Probe(pctx, p)
	cancel()
	switch {
	case ctx.Err() != nil:
	case err == nil:
		h.reach.Up(t)
	default:
		h.log.Debug("LAN probe: no answer yet", logkey.Peer, host, logkey.Err, err)
		h.reach.Down(t)
	}
	return true
}

// probeWaiting starts a probe of each peer with rows that wait in backoff after a LAN attempt:
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
			h.probes.Watch(reach.LAN(r.Host))
		}
	}
}

// reachStatus is the tracker's state as the api shows it (status, daemon status, doctor).
func (h *Host) reachStatus() []api.Reach {
	var out []api.Reach
	for _, st := range h.reach.All() {
		out = append(out, api.Reach{Target: string(st.Target), State: st.State.String(), Since: isoOrEmpty(st.Since),
			OutageSince: isoOrEmpty(st.OutageSince)})
	}
	return out
}
