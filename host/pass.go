package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// The outbox loop.
//
// A pass reads the due rows (the outbox's due index: O(due rows)), groups them by target host
// and sends each host's rows in one go on its own goroutine, so a slow or unreachable peer never
// holds up the others; a host whose previous send is still in flight is skipped until it
// returns. Each host's outcomes are recorded in one transaction: delivered rows end done, failed
// ones back off (min(5 s · 2^attempts, 1 h)), rejected ones end rejected and their sender gets an
// alert in the same transaction. A sweep ends the rows past their deadline (72 h without
// delivery) with the same alert.
const (
	// passLimit bounds the rows one pass reads.
	passLimit = 2000
	// lanAttemptTimeout bounds one host's send in a pass.
	lanAttemptTimeout = 30 * time.Second
	// sweepLimit bounds the rows one sweep ends.
	sweepLimit = 500
	// PruneAfter is how long ended outbox rows are kept (for `sent` and `outbox`).
	PruneAfter = 30 * 24 * time.Hour
	// minSweepEvery is the least time between two sweeps (each is a write transaction).
	minSweepEvery = 30 * time.Second
)

// transportFor picks the transport of a row. Only the LAN exists for now; the relay issue adds
// the choice (two LAN failures and an enrolled target, or no LAN address).
func (h *Host) transportFor(_ outbox.Row, _ PeerRecord) Transport {
	return h.transports[outbox.TransportLAN]
}

// pass runs one outbox pass. With wait it returns only when every send it started has been
// recorded (tests); the daemon does not wait. It returns how many rows it started sending.
func (h *Host) pass(ctx context.Context, wait bool) (int, error) {
	rows, err := h.ob.Due(ctx, passLimit)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	var peers map[string]PeerRecord
	if err := h.db.View(func(tx *bbolt.Tx) error {
		ps, err := peersTx(tx)
		peers = make(map[string]PeerRecord, len(ps))
		for _, p := range ps {
			peers[p.Host] = p
		}
		return err
	}); err != nil {
		return 0, err
	}
	groups := map[string][]outbox.Row{}
	var order []string
	for _, r := range rows {
		if r.State != outbox.StatePending {
			continue // relay-accepted rows due for a re-push belong to the relay transport
		}
		if _, ok := groups[r.Host]; !ok {
			order = append(order, r.Host)
		}
		groups[r.Host] = append(groups[r.Host], r)
	}
	var wg sync.WaitGroup
	started := 0
	for _, host := range order {
		grp := groups[host]
		peer, ok := peers[host]
		if !ok {
			// Unpinned since the row was made: nothing goes to an unpaired host. The row
			// waits (backoff) and ends at its deadline with an alert, unless the host is
			// pinned again.
			h.record(ctx, host, grp, failedAll(len(grp), "host is not paired (removed from peers)"), outbox.TransportLAN)
			continue
		}
		h.mu.Lock()
		busy := h.inflight[host]
		if !busy {
			h.inflight[host] = true
		}
		h.mu.Unlock()
		if busy {
			continue
		}
		started += len(grp)
		wg.Add(1)
		h.sends.Add(1)
		go func() {
			defer h.sends.Done()
			defer wg.Done()
			defer func() {
				h.mu.Lock()
				delete(h.inflight, host)
				h.mu.Unlock()
			}()
			tr := h.transportFor(grp[0], peer)
			sctx, cancel := context.WithTimeout(ctx, lanAttemptTimeout)
			out := tr.Send(sctx, peer, grp)
			cancel()
			if ctx.Err() != nil {
				return // shutting down: the rows stay due, the next start sends them again
			}
			h.record(ctx, host, grp, out, tr.Kind())
			h.kickOutbox() // more may have become due meanwhile
		}()
	}
	if wait {
		wg.Wait()
	}
	return started, nil
}

// record stores the outcomes of one host's attempt in one transaction.
func (h *Host) record(ctx context.Context, host string, rows []outbox.Row, out []Outcome, tr outbox.Transport) {
	alerts := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		alerts = 0
		ob := h.ob.In(tx)
		for i, r := range rows {
			o := out[i]
			var err error
			var row outbox.Row
			switch o.Kind {
			case OutcomeDelivered:
				row, err = ob.MarkDelivered(r.Key())
			case OutcomeRejected:
				row, err = ob.MarkRejected(r.Key(), tr, o.Err, false)
				if err == nil {
					var ok bool
					if ok, err = h.alertTx(tx, row); ok {
						alerts++
					}
				}
			case OutcomeRelayAccepted:
				if o.Acceptance == nil {
					err = errors.New("relay-accepted outcome without an acceptance")
					break
				}
				row, err = ob.MarkRelayAccepted(r.Key(), *o.Acceptance)
			default:
				msg := o.Err
				if msg == "" {
					msg = "attempt failed"
				}
				row, err = ob.MarkAttemptFailed(r.Key(), tr, errors.New(msg))
			}
			if errors.Is(err, outbox.ErrTransition) || errors.Is(err, outbox.ErrNotFound) {
				// Settled by a receipt (or swept) while the attempt ran: nothing to record.
				h.log.Debug("outbox outcome not recorded", "row", r.Key().String(), "err", err)
				continue
			}
			if err != nil {
				return err
			}
			switch o.Kind {
			case OutcomeDelivered:
				h.log.Debug("outbox row delivered", "row", row.Key().String(), "kind", row.Kind.String())
			case OutcomeRejected:
				h.log.Warn("outbox row rejected by peer", "row", row.Key().String(), "reason", o.Err)
			case OutcomeFailed:
				h.log.Debug("outbox attempt failed", "row", row.Key().String(), "attempts", row.Attempts, "next_at", row.NextAt, "err", o.Err)
			}
		}
		return nil
	})
	if err != nil {
		h.log.Error("recording outbox outcomes", "peer", host, "err", err)
		return
	}
	if alerts > 0 {
		h.mail.notify()
	}
}

// alertTx delivers the alert for a row that ended without delivery to its local sender, from the
// pseudo-sender mbx, kind alert: "Undelivered to <host>: <subject>" and the reason. It reports
// whether an alert was due (envelope rows with a local sender).
func (h *Host) alertTx(tx *bbolt.Tx, r outbox.Row) (bool, error) {
	neverHeard := tx.Bucket(bucketMeta).Get(heardKey(r.Host)) == nil
	a, ok := outbox.AlertFor(r, neverHeard)
	if !ok {
		return false, nil
	}
	now := h.clock()
	id := h.ulids.New(now)
	msg := storedMessage{
		ID: id, TS: mbx.ISOTime(now), From: AgentMBX, To: []string{a.Agent + "@" + h.name},
		Subject: a.Subject, Body: a.Body, Kind: string(mbx.KindAlert), Thread: id, ReplyTo: r.MsgID,
		Refs: []string{r.MsgID},
	}
	if err := h.deliverLocalTx(tx, &msg, []string{a.Agent}, now); err != nil {
		return false, err
	}
	h.log.Warn("message undelivered: sender alerted", "msg", r.MsgID, "peer", r.Host, "agent", a.Agent, "state", r.State.String(), "reason", r.Reason)
	return true, nil
}

// sweep ends the rows past their deadline (alerting their senders in the same transaction) and
// prunes ended rows and dedup marks that are old enough. It returns how many rows it ended.
func (h *Host) sweep(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ended, alerts := 0, 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		ended, alerts = 0, 0
		rows, err := h.ob.In(tx).Sweep(sweepLimit)
		if err != nil {
			return err
		}
		ended = len(rows)
		for _, r := range rows {
			ok, err := h.alertTx(tx, r)
			if err != nil {
				return err
			}
			if ok {
				alerts++
			}
		}
		_, err = h.ob.In(tx).Prune(h.clock().Add(-PruneAfter), sweepLimit)
		return err
	})
	if err != nil {
		return 0, err
	}
	if alerts > 0 {
		h.mail.notify()
	}
	if _, err := h.pruneSeen(sweepLimit); err != nil {
		return ended, err
	}
	return ended, nil
}

// runOutbox is the daemon's outbox loop: a pass and a sweep at every tick, when kicked (a send,
// a receipt queued, a verified hop from a peer) and when the next row comes due.
func (h *Host) runOutbox(ctx context.Context, tick time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	lastSweep := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-h.kick:
		}
		if _, err := h.pass(ctx, false); err != nil && ctx.Err() == nil {
			h.log.Error("outbox pass", "err", err)
		}
		if now := time.Now(); now.Sub(lastSweep) >= max(tick, minSweepEvery) {
			lastSweep = now
			if _, err := h.sweep(ctx); err != nil && ctx.Err() == nil {
				h.log.Error("outbox sweep", "err", err)
			}
		}
		wait := tick
		if at, ok, err := h.ob.NextDue(ctx); err == nil && ok {
			// Rows due already are in flight (their send kicks the loop when it ends).
			if d := at.Sub(h.clock()); d > 0 && d < wait {
				wait = max(d, 10*time.Millisecond)
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}
