package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/inbox"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
)

// Receiving from the relay (docs/design.md: Receive checkpoint and ack, Retention and expiry,
// Delivery receipts).
//
// An inbox.Receiver pulls the pinned relay's pages and hands each item, in seq order, to a
// relayHandler inside the transaction that also moves the receive checkpoint. The handler is this
// host's own receive path:
//
//   - an envelope from a paired host goes through prepareEnvelope and commitEnvelopeTx, exactly
//     like LAN mail (dedup by message id). A repeat is done, and re-sends the current delivery
//     receipt of every local copy whose last receipt is no longer on its way, because a sender
//     re-pushes only when it still waits for one (after an epoch change);
//   - a delivery receipt from a paired host goes through acceptReceiptTx (the acceptReceipt rules,
//     and a receipt of delivered or later settles the outbox row);
//   - a relay expiry notice (signed by the pinned relay key) ends the relay-accepted row it names
//     expired and alerts the sender, as the LAN outbox does after 72 h.
//
// Anything refused — an unpaired sender, a bad signature, an undecryptable body, a malformed or
// unknown item — goes to the quarantine with its reason and exact bytes, and is then done: never
// dropped. Items refused only because their sender was not paired are reprocessed in the
// transaction that pins that sender (PinPeer → releaseQuarantineTx).

// relayHandler is the inbox.Handler of one relay.
type relayHandler struct {
	h   *Host
	pin relayclient.Pin
}

var _ inbox.Handler = relayHandler{}

// senderPeerTx finds the pinned peer that pushed an item (by its current or a retired key).
func senderPeerTx(tx *bbolt.Tx, key string) (PeerRecord, bool, error) {
	peers, err := peersTx(tx)
	if err != nil {
		return PeerRecord{}, false, err
	}
	p, ok := peerWithKey(peers, key)
	return p, ok, nil
}

// causeOf classifies a receive-path refusal reason for the quarantine.
func causeOf(reason string) quarantine.Cause {
	switch reason {
	case ReasonBadSignature, ReasonSenderMismatch:
		return quarantine.CauseBadSignature
	case ReasonUndecryptable:
		return quarantine.CauseUndecryptable
	case ReasonUnpaired:
		return quarantine.CauseUnpaired
	case ReasonIDConflict:
		return quarantine.CauseRefused
	}
	return quarantine.CauseMalformed
}

func (rh relayHandler) HandleEnvelope(tx *bbolt.Tx, it inbox.Item) (inbox.Verdict, error) {
	h := rh.h
	if mbx.IsRotationNotice(it.Wire) {
		return h.handleRotationNotice(tx, it.ItemID, it.Sender, it.Wire)
	}
	peer, ok, err := senderPeerTx(tx, it.Sender)
	if err != nil {
		return inbox.Verdict{}, err
	}
	if !ok {
		return inbox.Rejected(quarantine.CauseUnpaired, ReasonUnpaired), nil
	}
	in, err := h.prepareEnvelope(peer, it.Wire, true)
	if err != nil {
		st, _ := rejected(err)
		reason := strings.TrimPrefix(st, mbx.StatusRejectedPrefix)
		return inbox.Rejected(causeOf(reason), reason), nil
	}
	if in.Env.ID != it.ItemID {
		return inbox.Rejected(quarantine.CauseMalformed, "item id is not the envelope id"), nil
	}
	st, err := h.commitEnvelopeTx(tx, in)
	if err != nil {
		if s, ok := rejected(err); ok {
			reason := strings.TrimPrefix(s, mbx.StatusRejectedPrefix)
			return inbox.Rejected(causeOf(reason), reason), nil
		}
		return inbox.Verdict{}, err
	}
	if st == mbx.StatusDuplicate {
		n, err := h.resendReceiptsTx(tx, in.Env.ID, peer.Host)
		if err != nil {
			return inbox.Verdict{}, err
		}
		if n > 0 {
			tx.OnCommit(h.kickOutbox)
		}
		return inbox.Duplicate(), nil
	}
	if err := failpoint.Inject(FailRelayHandledBeforeCommit); err != nil {
		return inbox.Verdict{}, err
	}
	tx.OnCommit(h.Wake)
	return inbox.Accepted(), nil
}

func (rh relayHandler) HandleReceipt(tx *bbolt.Tx, it inbox.Item) (inbox.Verdict, error) {
	h := rh.h
	peer, ok, err := senderPeerTx(tx, it.Sender)
	if err != nil {
		return inbox.Verdict{}, err
	}
	if !ok {
		return inbox.Rejected(quarantine.CauseUnpaired, ReasonUnpaired), nil
	}
	s, err := mbx.ParseReceipt(it.Wire)
	if err != nil {
		return inbox.Rejected(quarantine.CauseMalformed, err.Error()), nil
	}
	if s.ItemID() != it.ItemID {
		return inbox.Rejected(quarantine.CauseMalformed, "item id is not the receipt id"), nil
	}
	// The pushing host must be the recipient's host (the relay checked that it signed the push).
	_, st, err := h.acceptReceiptTx(tx, it.Wire, peer.Host)
	if err != nil {
		return inbox.Verdict{}, err
	}
	switch {
	case st == receiptStatus(mbx.StatusAccepted):
		tx.OnCommit(h.kickOutbox)
		return inbox.Accepted(), nil
	case strings.HasPrefix(string(st), mbx.StatusRejectedPrefix):
		reason := strings.TrimPrefix(string(st), mbx.StatusRejectedPrefix)
		cause := quarantine.CauseRefused
		switch {
		case strings.Contains(reason, mbx.ErrReceiptSignature.Error()):
			cause = quarantine.CauseBadSignature
		case strings.Contains(reason, mbx.ErrReceiptNotPaired.Error()):
			cause = quarantine.CauseUnpaired
		case strings.Contains(reason, mbx.ErrReceiptInvalid.Error()), strings.Contains(reason, mbx.ErrReceiptWire.Error()):
			cause = quarantine.CauseMalformed
		}
		return inbox.Rejected(cause, reason), nil
	default: // duplicate, stale
		return inbox.Duplicate(), nil
	}
}

func (rh relayHandler) HandleExpired(tx *bbolt.Tx, it inbox.Item) (inbox.Verdict, error) {
	h := rh.h
	n, err := mbx.CheckExpiryNotice(it.Wire, it.Sender, rh.pin.RelayKey)
	if err != nil {
		cause := quarantine.CauseMalformed
		if errors.Is(err, mbx.ErrExpirySignature) || errors.Is(err, mbx.ErrExpirySender) {
			cause = quarantine.CauseBadSignature
		}
		return inbox.Rejected(cause, err.Error()), nil
	}
	if n.NoticeItemID() != it.ItemID {
		return inbox.Rejected(quarantine.CauseMalformed, "item id is not the notice's"), nil
	}
	ob := h.ob.In(tx)
	rows, err := ob.ByItem(n.ItemID)
	if err != nil {
		return inbox.Verdict{}, err
	}
	for _, r := range rows {
		if r.HostKey != n.TargetPubkey || r.Kind != outbox.KindEnvelope {
			continue
		}
		if !r.State.Active() || (r.Relay != "" && r.Relay != rh.pin.URL) {
			return inbox.Duplicate(), nil // settled or ended already, or not this relay's
		}
		reason := fmt.Sprintf("the relay dropped it undelivered at %s (accepted %s, retention over)", n.ExpiredAt, n.AcceptedAt)
		row, err := ob.MarkExpired(r.Key(), reason)
		if err != nil {
			if errors.Is(err, outbox.ErrTransition) {
				return inbox.Duplicate(), nil
			}
			return inbox.Verdict{}, err
		}
		alerted, err := h.alertTx(tx, row)
		if err != nil {
			return inbox.Verdict{}, err
		}
		if alerted {
			tx.OnCommit(h.mail.notify)
		}
		return inbox.Accepted(), nil
	}
	h.log.Info("relay expiry notice for no outbox row here", logkey.Item, n.ItemID, logkey.Target, mbx.Fingerprint(n.TargetPubkey))
	return inbox.Duplicate(), nil
}

// resendReceiptsTx queues again the current delivery receipt of each local copy of message msgID
// from origin whose last receipt is no longer on its way (its row ended or was pruned): the
// sender re-pushed the message, so it still waits for one. Each re-send takes the next seq, so
// the sender's acceptReceipt takes it. It returns how many it queued.
func (h *Host) resendReceiptsTx(tx *bbolt.Tx, msgID, origin string) (int, error) {
	var msg storedMessage
	found, err := getJSON(tx.Bucket(bucketMessages), []byte(msgID), &msg)
	if err != nil || !found || msg.Origin != origin {
		return 0, err
	}
	agents, err := h.expandIncomingTx(tx, msg.To)
	if err != nil {
		return 0, err
	}
	box, ob, now := tx.Bucket(bucketMbox), h.ob.In(tx), h.clock()
	n := 0
	for _, a := range agents {
		var e mboxEntry
		found, err := getJSON(box, key2(a, msgID), &e)
		if err != nil {
			return n, err
		}
		if !found || e.Origin != origin {
			continue
		}
		last := mbx.ReceiptItemID(msgID, a+"@"+h.name, e.Seq)
		r, err := ob.Get(outbox.Key{ItemID: last, Host: origin})
		if err == nil && r.State.Active() {
			continue // still on its way
		}
		if err != nil && !errors.Is(err, outbox.ErrNotFound) {
			return n, err
		}
		e.Seq++
		if err := h.queueReceiptTx(tx, origin, msgID, a, e, now); err != nil {
			return n, err
		}
		if err := putJSON(box, key2(a, msgID), e); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// handle dispatches an item by kind, as the inbox does.
func (rh relayHandler) handle(tx *bbolt.Tx, it inbox.Item) (inbox.Verdict, error) {
	switch it.Kind {
	case mbx.ItemKindEnvelope:
		return rh.HandleEnvelope(tx, it)
	case mbx.ItemKindReceipt:
		return rh.HandleReceipt(tx, it)
	case mbx.ItemKindExpired:
		return rh.HandleExpired(tx, it)
	}
	return inbox.Rejected(quarantine.CauseUnknownKind, "unknown item kind"), nil
}

// releaseQuarantineTx reprocesses, inside tx (the transaction that pinned the peer), the items
// quarantined only because key was not a paired host. Items still refused go back to the
// quarantine with their new reason. It returns how many were accepted.
func (h *Host) releaseQuarantineTx(tx *bbolt.Tx, key string) (int, error) {
	q := h.quar.In(tx)
	es, err := q.Release(key)
	if err != nil || len(es) == 0 {
		return 0, err
	}
	pin := relayclient.Pin{}
	if s, err := loadRelayTx(tx); err == nil && s != nil {
		pin = s.pin()
	}
	n := 0
	for _, e := range es {
		rh := relayHandler{h: h, pin: relayclient.Pin{URL: e.Relay}}
		if e.Relay == pin.URL {
			rh.pin = pin
		}
		v, err := rh.handle(tx, inbox.Item{Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, Kind: e.Kind,
			ItemID: e.ItemID, Sender: e.Sender, Wire: e.Wire})
		if err != nil {
			return n, err
		}
		if v.Outcome != inbox.OutcomeRejected {
			n++
			continue
		}
		e.Cause, e.Reason = v.Cause, v.Reason
		if _, _, err := q.Put(e); err != nil {
			return n, err
		}
	}
	if n > 0 {
		h.log.Info("quarantined relay items released after pairing", logkey.Sender, mbx.Fingerprint(key), logkey.Accepted, n, logkey.Held, len(es)-n)
	}
	return n, nil
}

// relayReceiver returns the receiver of the pinned relay (made once per link).
func (h *Host) relayReceiver(l *relayLink, opts inbox.ReceiverOptions) (*inbox.Receiver, error) {
	h.rl.mu.Lock()
	defer h.rl.mu.Unlock()
	if h.rl.link == l && h.rl.recv != nil {
		return h.rl.recv, nil
	}
	opts.OnReset = func(_ context.Context, p inbox.Position) { h.relayReset(l, p) }
	opts.Reenrol = func(ctx context.Context) error { return h.relayKeep(ctx, true) }
	if opts.Logger == nil {
		opts.Logger = h.log
	}
	r, err := h.rpos.NewReceiver(l.pin.URL, h.relaySource(l), relayHandler{h: h, pin: l.pin}, &opts)
	if err != nil {
		return nil, err
	}
	if h.rl.link == l {
		h.rl.recv = r
	}
	return r, nil
}

// relayReset is the receiver's OnReset: the relay's store went back in time or changed epoch, so
// what it accepted may be gone. Every relay-accepted row at this relay goes out again: those of
// other epochs after an epoch change, all of them after a rewind in the same epoch.
func (h *Host) relayReset(l *relayLink, p inbox.Position) {
	why := inbox.ResetReason(0)
	if p.LastReset != nil {
		why = p.LastReset.Reason
	}
	epoch := p.Epoch
	if why == inbox.ResetRewound || why == inbox.ResetBadAck {
		epoch = ""
	}
	if why == inbox.ResetEpochChanged && p.Epoch != "" {
		h.relayEpochSeen(l, p.Epoch)
	}
	n := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		var err error
		n, err = h.ob.In(tx).RepushRelay(l.pin.URL, epoch)
		return err
	})
	if err != nil {
		h.log.Error("flagging relay-accepted rows for a re-push", logkey.Relay, l.pin.URL, logkey.Err, err)
		return
	}
	h.log.Warn("relay receive position reset: pulling again from 0", logkey.Relay, l.pin.URL, logkey.Reason, why.String(), logkey.Epoch, p.Epoch, logkey.Repush, n)
	if n > 0 {
		h.kickOutbox()
	}
	poke(h.rl.keep)
}

// relaySource is the relay client of link as the receiver sees it (relaylink.Source): it records
// pull failures as problems and a changed relay key as a stop.
func (h *Host) relaySource(l *relayLink) relaylink.Source {
	return relaylink.Source{Client: l.c,
		ObservePull: func(ctx context.Context, err error) {
			var ee *relayclient.EpochError
			switch {
			case err == nil:
				h.relayProblem(l, opPull, nil)
				h.relayAnswered(ctx)
			case errors.As(err, &ee):
			case ctx.Err() != nil:
			default:
				h.relayFailed(l, opPull, err)
			}
		},
		ObserveAck: func(err error) {
			var kc *relayclient.KeyChangedError
			if errors.As(err, &kc) {
				h.relayKeyChanged(l, kc)
			}
		},
	}
}

// relayReceive pulls and processes pages until the relay has nothing more (tests and `relay
// status` probes; the daemon runs the receiver's own loop). It returns the items done.
func (h *Host) relayReceive(ctx context.Context) (int, error) {
	l, err := h.relayLink()
	if err != nil {
		return 0, err
	}
	r, err := h.relayReceiver(l, inbox.ReceiverOptions{})
	if err != nil {
		return 0, err
	}
	done := 0
	for range 1000 {
		st, err := r.Step(ctx)
		done += st.Done()
		if err != nil {
			if errors.Is(err, relayclient.ErrNotEnrolled) {
				if kerr := h.relayKeep(ctx, true); kerr == nil {
					continue
				}
			}
			return done, err
		}
		if !st.More && st.Reset == 0 {
			return done, nil
		}
	}
	return done, nil
}
