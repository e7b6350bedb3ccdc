package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relaylink"
	"github.com/agentmbx/agentmbx/rotation"
)

// The outbox loop.
//
// A pass reads the due rows (the outbox's due index: O(due rows)), groups them by target host
// and sends each host's rows in one go on its own goroutine, so a slow or unreachable peer never
// holds up the others; a host whose previous send is still in flight is skipped until it
// returns. Within a host, each row goes over the transport transportFor picks (LAN or relay).
// Each host's outcomes are recorded in one transaction per transport: delivered rows end done,
// relay-accepted ones wait for their receipts, failed ones back off (min(5 s · 2^attempts, 1 h) ±20%),
// retryable rejections too, other rejections end rejected and their sender gets an alert in the
// same transaction. When a target answers again after an outage, the rows waiting for it become
// due at once (flush.go). A sweep ends the rows past their deadline (72 h without delivery; for
// relay-accepted rows accepted_at + retention + 24 h) with the same alert.
const (
	// passLimit and passBytes bound the rows one pass reads, and the wire bytes it holds (the
	// rest waits for the next pass: each host's send kicks one when it ends).
	passLimit = 2000
	passBytes = 64 << 20
	// lanAttemptTimeout bounds one host's send in a pass.
	lanAttemptTimeout = 30 * time.Second
	// sweepLimit bounds the rows one sweep ends.
	sweepLimit = 500
	// PruneAfter is how long ended outbox rows are kept (for `sent` and `outbox`).
	PruneAfter = 30 * 24 * time.Hour
	// minSweepEvery is the least time between two sweeps (each is a write transaction).
	minSweepEvery = 30 * time.Second
)

// pass runs one outbox pass. With wait it returns only when every send it started has been
// recorded (tests); the daemon does not wait. It returns how many rows it started sending.
func (h *Host) pass(ctx context.Context, wait bool) (int, error) {
	var wg sync.WaitGroup
	started, err := h.dispatch(ctx, &wg)
	if wait {
		wg.Wait()
	}
	return started, err
}

// dispatch reads the due rows and starts a send for each host that has none in flight (wg
// counts them). Passes dispatch one at a time.
func (h *Host) dispatch(ctx context.Context, wg *sync.WaitGroup) (int, error) {
	h.passMu.Lock()
	defer h.passMu.Unlock()
	// The rows of hosts with a send in flight are left alone. Those hosts are taken before the
	// rows are read: a send that ends between the two reads would otherwise leave this pass with
	// rows older than its outcome (a row delivered or relay-accepted meanwhile, sent again,
	// perhaps over the LAN). Sends start only in passes, and passes run one at a time, so a host
	// not busy now has no send whose outcome the rows below could miss.
	h.mu.Lock()
	busy := maps.Clone(h.inflight)
	h.mu.Unlock()
	rows, err := h.ob.DueWith(ctx, outbox.DueFilter{Limit: passLimit, MaxBytes: passBytes,
		Skip: func(host string) bool { return busy[host] }})
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
		if _, ok := groups[r.Host]; !ok {
			order = append(order, r.Host)
		}
		groups[r.Host] = append(groups[r.Host], r)
	}
	started := 0
	for _, host := range order {
		grp := groups[host]
		peer, ok := peers[host]
		if !ok {
			// Unpinned since the row was made: nothing goes to an unpaired host. The row
			// waits (backoff) and ends at its deadline with an alert, unless the host is
			// pinned again.
			var lan, relay []outbox.Row
			for _, r := range grp {
				if r.State == outbox.StateRelayAccepted {
					relay = append(relay, r)
				} else {
					lan = append(lan, r)
				}
			}
			const why = "host is not paired (removed from peers)"
			if len(lan) > 0 {
				h.record(ctx, host, lan, outbox.FailedAll(len(lan), errors.New(why), false), outbox.TransportLAN)
			}
			if len(relay) > 0 {
				h.record(ctx, host, relay, outbox.FailedAll(len(relay), errors.New(why), false), outbox.TransportRelay)
			}
			continue
		}
		h.mu.Lock()
		h.inflight[host] = true
		h.mu.Unlock()
		started += len(grp)
		wg.Add(1)
		h.sends.Add(1)
		h.spawn(func() {
			defer h.sends.Done()
			defer wg.Done()
			defer func() {
				h.mu.Lock()
				delete(h.inflight, host)
				h.mu.Unlock()
			}()
			if h.sendHost(ctx, peer, grp) {
				h.kickOutbox() // more may have become due meanwhile
			}
			// Otherwise the rows stay due unrecorded (the store failed, or shutdown): the next
			// tick retries them, not an immediate pass.
		})
	}
	return started, nil
}

// sendHost sends one host's due rows, each over the transport transportFor picks, and records the
// outcomes. Rows flagged for a re-push while no relay is usable back off. It reports whether
// every outcome was recorded.
func (h *Host) sendHost(ctx context.Context, peer PeerRecord, rows []outbox.Row) bool {
	link, why := h.relay.Usable(), ""
	if link == nil {
		why = "no relay is set"
		if _, err := h.relay.Conn(); errors.Is(err, relaylink.ErrRelayStopped) || errors.Is(err, rotation.ErrRelayRotating) {
			why = err.Error()
		}
	}
	now := h.clock()
	var lan, relay, stuck []outbox.Row
	for _, r := range rows {
		switch {
		case h.transportFor(r, peer, link != nil, now) == outbox.TransportLAN:
			lan = append(lan, r)
		case link == nil:
			stuck = append(stuck, r)
		default:
			relay = append(relay, r)
		}
	}
	var failed atomic.Bool
	if len(stuck) > 0 && !h.record(ctx, peer.Host, stuck, outbox.FailedAll(len(stuck), errors.New("re-push to the relay: "+why), false), outbox.TransportRelay) {
		failed.Store(true)
	}
	// The two transports go at the same time: a LAN address that swallows packets does not hold
	// up the rows for the relay.
	if until, paused := h.relay.Paused(now); paused && len(relay) > 0 {
		// The relay asked to slow down: its rows wait for the pause's end (relaylink/pause.go).
		if !h.relay.Postpone(ctx, relay, until) {
			failed.Store(true)
		}
		relay = nil
	}
	var relaySender outbox.Sender
	if len(relay) > 0 { // then link is set
		relaySender = h.relay.Pusher(link)
	}
	var wg sync.WaitGroup
	for _, part := range []struct {
		rows []outbox.Row
		tr   outbox.Sender
	}{{lan, h.senders[outbox.TransportLAN]}, {relay, relaySender}} {
		if len(part.rows) == 0 {
			continue
		}
		wg.Add(1)
		h.spawn(func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, lanAttemptTimeout)
			out := part.tr.Send(sctx, outboxPeer(peer), part.rows)
			cancel()
			if ctx.Err() != nil {
				failed.Store(true)
				return // shutting down: the rows stay due, the next start sends them again
			}
			rows := part.rows
			// Rows the relay pacer did not get to in time were not sent: no attempt to record,
			// they stay due for the next pass.
			rows, out = sentOnly(rows, out)
			// Reported before the record: a recovery's flush then leaves these rows alone.
			h.observe(part.tr.Kind(), peer.Host, out)
			if part.tr.Kind() == outbox.TransportRelay {
				var ok bool
				if rows, out, ok = h.relay.HoldRefused(ctx, rows, out); !ok {
					failed.Store(true)
				}
			}
			if len(rows) > 0 && !h.record(ctx, peer.Host, rows, out, part.tr.Kind()) {
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// sentOnly drops the rows whose outcome says they were not sent (relaylink.ErrNotSent).
func sentOnly(rows []outbox.Row, out []outbox.Outcome) ([]outbox.Row, []outbox.Outcome) {
	var keepRows []outbox.Row
	var keepOut []outbox.Outcome
	for i, o := range out {
		if o.Err != nil && errors.Is(o.Err, relaylink.ErrNotSent) {
			continue
		}
		keepRows, keepOut = append(keepRows, rows[i]), append(keepOut, o)
	}
	return keepRows, keepOut
}

// spawn runs fn on a goroutine of its own, or at once on this one when the host is serial
// (Options.Serial).
func (h *Host) spawn(fn func()) {
	if h.serial {
		fn()
		return
	}
	go fn()
}

// record stores the outcomes of one host's attempt in one transaction, and reports whether it
// committed.
func (h *Host) record(ctx context.Context, host string, rows []outbox.Row, out []outbox.Outcome, tr outbox.Transport) bool {
	err := h.db.Update(func(tx *bbolt.Tx) error {
		ob := h.ob.In(tx)
		var accepted []outbox.Row
		for i, r := range rows {
			o := out[i]
			var err error
			var row outbox.Row
			switch o.Kind {
			case outbox.OutcomeDelivered:
				// Only over the LAN, on the peer's valid signed statement (lan_accept.go).
				row, err = ob.MarkDelivered(r.Key())
				if err == nil || errors.Is(err, outbox.ErrTransition) {
					if serr := h.lanSignedTx(tx, host); serr != nil {
						err = serr
					}
				}
			case outbox.OutcomeLANUnsigned:
				if o.Err == nil {
					o.Err = errors.New("the peer's address answered without a signed statement")
				}
				row, err = h.lanUnsignedTx(tx, host, r, o)
			case outbox.OutcomeRejected:
				row, err = ob.MarkRejected(r.Key(), tr, o.Reason(), o.Retryable)
				if err == nil && !o.Retryable {
					_, err = h.alertTx(tx, row)
				}
			case outbox.OutcomeRelayAccepted:
				// The statement is checked again against the row as it is now, in the
				// transaction that records it (the row may have been rebound meanwhile).
				var cur outbox.Row
				if cur, err = ob.Get(r.Key()); err != nil {
					break
				}
				if verr := h.rot.VerifyAcceptance(cur, o); verr != nil {
					h.log.Warn("relay accept statement refused", logkey.Row, r.Key().String(), logkey.Err, verr)
					row, err = ob.MarkAttemptFailed(r.Key(), tr, fmt.Errorf("relay accept statement refused: %w", verr))
					break
				}
				row, err = ob.MarkRelayAccepted(r.Key(), *o.Acceptance)
			case outbox.OutcomeRelaySentV1:
				row, err = ob.MarkRelaySentV1(r.Key(), o.Relay)
			default:
				ferr := o.Err
				if ferr == nil {
					ferr = errors.New("attempt failed")
				}
				row, err = ob.MarkAttemptFailed(r.Key(), tr, ferr)
			}
			if errors.Is(err, outbox.ErrInvalid) && o.Kind != outbox.OutcomeFailed {
				// The outcome carries something the outbox does not store (a relay's statement
				// with an unusable field): the attempt failed. Nothing was written for it, and
				// the other rows' outcomes are still recorded.
				h.log.Warn("outbox outcome not storable: recorded as a failed attempt", logkey.Row, r.Key().String(), logkey.Err, err)
				row, err = ob.MarkAttemptFailed(r.Key(), tr, fmt.Errorf("%s outcome not storable: %w", o.Kind, err))
				o.Kind = outbox.OutcomeFailed
			}
			kind := o.Kind // counted once committed, also when a receipt settled the row first
			tx.OnCommit(func() { h.ops.Outcome(tr, kind) })
			if errors.Is(err, outbox.ErrTransition) || errors.Is(err, outbox.ErrNotFound) {
				// Settled by a receipt (or swept) while the attempt ran: nothing to record.
				h.log.Debug("outbox outcome not recorded", logkey.Row, r.Key().String(), logkey.Err, err)
				continue
			}
			if err != nil {
				return err
			}
			switch o.Kind {
			case outbox.OutcomeDelivered:
				h.log.Debug("outbox row delivered", logkey.Row, row.Key().String(), logkey.Kind, row.Kind.String())
			case outbox.OutcomeRejected:
				h.log.Warn("outbox row rejected", logkey.Row, row.Key().String(), logkey.Transport, tr.String(), logkey.Reason, o.Err, logkey.Retry, o.Retryable)
			case outbox.OutcomeRelaySentV1:
				h.log.Debug("outbox row sent through a v1 relay: waiting for its delivery receipt", logkey.Row, row.Key().String(), logkey.Kind, row.Kind.String())
			case outbox.OutcomeLANUnsigned:
				h.log.Debug("outbox row answered over the LAN without a valid signed statement: not delivered", logkey.Row, row.Key().String(),
					logkey.State, row.State.String(), logkey.Err, o.Err)
			case outbox.OutcomeRelayAccepted:
				accepted = append(accepted, row)
				h.log.Debug("outbox row accepted by the relay", logkey.Row, row.Key().String(), logkey.Seq, row.Seq, logkey.Epoch, row.Epoch)
			case outbox.OutcomeFailed:
				h.log.Debug("outbox attempt failed", logkey.Row, row.Key().String(), logkey.Attempts, row.Attempts, logkey.NextAt, row.NextAt, logkey.Err, o.Err)
			}
		}
		// An answer from before an epoch change the host has learned since: those rows go
		// out again (relaylink.StaleAcceptsTx).
		if len(accepted) > 0 {
			n, err := h.relay.StaleAcceptsTx(tx, accepted)
			if err != nil {
				return err
			}
			if n > 0 {
				h.log.Warn("relay accepted rows in an epoch it has left since: sending them again", logkey.Peer, host, logkey.Repush, n)
				tx.OnCommit(h.kickOutbox)
			}
		}
		return nil
	})
	if err != nil {
		h.log.Error("recording outbox outcomes", logkey.Peer, host, logkey.Err, err)
		return false
	}
	return true
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
	msg := mailstore.Message{
		ID: id, TS: mbx.ISOTime(now), From: AgentMBX, To: []string{a.Agent + "@" + h.name},
		Subject: a.Subject, Body: a.Body, Kind: string(mbx.KindAlert), Thread: id, ReplyTo: r.MsgID,
		Refs: []string{r.MsgID}, Via: api.ViaLocal, Key: h.key.Fingerprint(),
	}
	if err := h.mail.DeliverTx(tx, &msg, []string{a.Agent}, now); err != nil {
		return false, err
	}
	h.log.Warn("message undelivered: sender alerted", logkey.Msg, r.MsgID, logkey.Peer, r.Host, logkey.Agent, a.Agent, logkey.State, r.State.String(), logkey.Reason, r.Reason)
	return true, nil
}

// sweep ends the rows past their deadline (alerting their senders in the same transaction) and
// prunes ended rows and dedup marks that are old enough. It returns how many rows it ended.
func (h *Host) sweep(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ended := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		rows, err := h.ob.In(tx).Sweep(sweepLimit)
		if err != nil {
			return err
		}
		ended = len(rows)
		for _, r := range rows {
			if _, err := h.alertTx(tx, r); err != nil {
				return err
			}
		}
		_, err = h.ob.In(tx).Prune(h.clock().Add(-PruneAfter), sweepLimit)
		return err
	})
	if err != nil {
		return 0, err
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
			h.log.Error("outbox pass", logkey.Err, err)
		}
		if now := time.Now(); now.Sub(lastSweep) >= max(tick, minSweepEvery) {
			lastSweep = now
			if _, err := h.sweep(ctx); err != nil && ctx.Err() == nil {
				h.log.Error("outbox sweep", logkey.Err, err)
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
