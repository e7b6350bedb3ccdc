package relaylink

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Receiving from the relay (docs/design.md: Receive checkpoint and ack, Retention and expiry,
// Delivery receipts).
//
// An checkpoint.Receiver pulls the pinned relay's pages and hands each item, in seq order, to a
// handler inside the transaction that also moves the receive checkpoint:
//
//   - an envelope goes to Host.Envelope, the host's own receive path (a paired sender, dedup by
//     message id), which commits it in that transaction;
//   - a delivery receipt from a paired host goes to Host.Receipt (the acceptReceipt rules, and a
//     receipt of delivered or later settles the outbox row);
//   - a relay expiry notice (signed by the pinned relay key) ends the relay-accepted row it names
//     expired and alerts the sender, as the LAN outbox does after 72 h.
//
// Anything refused — an unpaired sender, a bad signature, an undecryptable body, a malformed or
// unknown item — goes to the quarantine with its reason and exact bytes, and is then done: never
// dropped. Items refused only because their sender was not paired are reprocessed in the
// transaction that pins that sender (ReleaseTx).

// handler is the checkpoint.Handler of one relay.
type handler struct {
	l   *Link
	pin relayclient.Pin
}

var _ checkpoint.Handler = handler{}

// Handler is the checkpoint.Handler of the relay pin: what a Receiver of it hands each item to.
func (l *Link) Handler(pin relayclient.Pin) checkpoint.Handler { return handler{l: l, pin: pin} }

// senderTx finds the pinned peer that pushed an item (by its current or a retired key).
func (rh handler) senderTx(tx *bbolt.Tx, key string) (Peer, bool, error) {
	peers, err := rh.l.host.Peers(tx)
	if err != nil {
		return Peer{}, false, err
	}
	p, ok := peerWithKey(peers, key)
	return p, ok, nil
}

// unpaired is the reason of an item from a host that is not paired.
const unpaired = "host not paired"

func (rh handler) HandleEnvelope(tx *bbolt.Tx, it checkpoint.Item) (checkpoint.Verdict, error) {
	return rh.l.host.Envelope(tx, it)
}

func (rh handler) HandleReceipt(tx *bbolt.Tx, it checkpoint.Item) (checkpoint.Verdict, error) {
	peer, ok, err := rh.senderTx(tx, it.Sender)
	if err != nil {
		return checkpoint.Verdict{}, err
	}
	if !ok {
		return checkpoint.Rejected(quarantine.CauseUnpaired, unpaired), nil
	}
	s, err := mbx.ParseReceipt(it.Wire)
	if err != nil {
		return checkpoint.Rejected(quarantine.CauseMalformed, err.Error()), nil
	}
	if s.ItemID() != it.ItemID {
		return checkpoint.Rejected(quarantine.CauseMalformed, "item id is not the receipt id"), nil
	}
	// The pushing host must be the recipient's host (the relay checked that it signed the push).
	v, err := rh.l.host.Receipt(tx, peer.Host, it.Wire)
	if err != nil {
		return checkpoint.Verdict{}, err
	}
	if v.Outcome == checkpoint.OutcomeAccepted {
		tx.OnCommit(rh.l.host.KickOutbox)
	}
	return v, nil
}

func (rh handler) HandleExpired(tx *bbolt.Tx, it checkpoint.Item) (checkpoint.Verdict, error) {
	n, err := mbx.CheckExpiryNotice(it.Wire, it.Sender, rh.pin.RelayKey)
	if err != nil {
		cause := quarantine.CauseMalformed
		if errors.Is(err, mbx.ErrExpirySignature) || errors.Is(err, mbx.ErrExpirySender) {
			cause = quarantine.CauseBadSignature
		}
		return checkpoint.Rejected(cause, err.Error()), nil
	}
	if n.NoticeItemID() != it.ItemID {
		return checkpoint.Rejected(quarantine.CauseMalformed, "item id is not the notice's"), nil
	}
	ob := rh.l.ob.In(tx)
	rows, err := ob.ByItem(n.ItemID)
	if err != nil {
		return checkpoint.Verdict{}, err
	}
	for _, r := range rows {
		if r.HostKey != n.TargetPubkey || r.Kind != outbox.KindEnvelope {
			continue
		}
		if !r.State.Active() || (r.Relay != "" && r.Relay != rh.pin.URL) {
			return checkpoint.Duplicate(), nil // settled or ended already, or not this relay's
		}
		reason := fmt.Sprintf("the relay dropped it undelivered at %s (accepted %s, retention over)", n.ExpiredAt, n.AcceptedAt)
		row, err := ob.MarkExpired(r.Key(), reason)
		if err != nil {
			if errors.Is(err, outbox.ErrTransition) {
				return checkpoint.Duplicate(), nil
			}
			return checkpoint.Verdict{}, err
		}
		if err := rh.l.host.Alert(tx, row); err != nil {
			return checkpoint.Verdict{}, err
		}
		return checkpoint.Accepted(), nil
	}
	rh.l.log.Info("relay expiry notice for no outbox row here", logkey.Item, n.ItemID, logkey.Target, mbx.Fingerprint(n.TargetPubkey))
	return checkpoint.Duplicate(), nil
}

// handle dispatches an item by kind, as the inbox does.
func (rh handler) handle(tx *bbolt.Tx, it checkpoint.Item) (checkpoint.Verdict, error) {
	switch it.Kind {
	case mbx.ItemKindEnvelope:
		return rh.HandleEnvelope(tx, it)
	case mbx.ItemKindReceipt:
		return rh.HandleReceipt(tx, it)
	case mbx.ItemKindExpired:
		return rh.HandleExpired(tx, it)
	}
	return checkpoint.Rejected(quarantine.CauseUnknownKind, "unknown item kind"), nil
}

// ReleaseTx reprocesses, inside tx (the transaction that pinned the peer), the items quarantined
// only because key was not a paired host. Items still refused go back to the quarantine with
// their new reason. It returns how many were accepted.
func (l *Link) ReleaseTx(tx *bbolt.Tx, key string) (int, error) {
	q := l.quar.In(tx)
	es, err := q.Release(key)
	if err != nil || len(es) == 0 {
		return 0, err
	}
	pin := relayclient.Pin{}
	if s, err := LoadTx(tx); err == nil && s != nil {
		pin = s.Pin()
	}
	n := 0
	for _, e := range es {
		rh := handler{l: l, pin: relayclient.Pin{URL: e.Relay}}
		if e.Relay == pin.URL {
			rh.pin = pin
		}
		v, err := rh.handle(tx, checkpoint.Item{Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, Kind: e.Kind,
			ItemID: e.ItemID, Sender: e.Sender, Wire: e.Wire})
		if err != nil {
			return n, err
		}
		if v.Outcome != checkpoint.OutcomeRejected {
			n++
			continue
		}
		e.Cause, e.Reason = v.Cause, v.Reason
		if _, _, err := q.Put(e); err != nil {
			return n, err
		}
	}
	if n > 0 {
		l.log.Info("quarantined relay items released after pairing", logkey.Sender, mbx.Fingerprint(key), logkey.Accepted, n, logkey.Held, len(es)-n)
	}
	return n, nil
}

// Receiver returns the receiver of the connection c (made once per connection).
func (l *Link) Receiver(c *Conn, opts checkpoint.ReceiverOptions) (*checkpoint.Receiver, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == c && l.recv != nil {
		return l.recv, nil
	}
	opts.OnReset = func(_ context.Context, p checkpoint.Position) { l.reset(c, p) }
	opts.Reenrol = func(ctx context.Context) error { return l.Keep(ctx, true) }
	if opts.Logger == nil {
		opts.Logger = l.log
	}
	var src checkpoint.Relay = l.source(c)
	if c.V1 != nil {
		src = l.sourceV1(c)
	}
	r, err := l.rpos.NewReceiver(c.Pin.URL, src, handler{l: l, pin: c.Pin}, &opts)
	if err != nil {
		return nil, err
	}
	if l.conn == c {
		l.recv = r
	}
	return r, nil
}

// reset is the receiver's OnReset: the relay's store went back in time or changed epoch, so what
// it accepted may be gone. Every relay-accepted row at this relay goes out again: those of other
// epochs after an epoch change, all of them after a rewind in the same epoch.
func (l *Link) reset(c *Conn, p checkpoint.Position) {
	why := checkpoint.ResetReason(0)
	if p.LastReset != nil {
		why = p.LastReset.Reason
	}
	epoch := p.Epoch
	if why == checkpoint.ResetRewound || why == checkpoint.ResetBadAck {
		epoch = ""
	}
	if why == checkpoint.ResetEpochChanged && p.Epoch != "" {
		l.epochSeen(c, p.Epoch)
	}
	n, resent := 0, 0
	err := l.db.Update(func(tx *bbolt.Tx) error {
		var err error
		if n, err = l.ob.In(tx).RepushRelay(c.Pin.URL, epoch); err != nil {
			return err
		}
		retention := mbx.DefaultLimits().Retention()
		if s, err := LoadTx(tx); err != nil {
			return err
		} else if s != nil {
			retention = s.LimitsOrDefault().Retention()
		}
		resent, err = l.resendLostReceiptsTx(tx, c.Pin.URL, epoch, retention)
		return err
	})
	if err != nil {
		l.log.Error("flagging relay-accepted rows for a re-push", logkey.Relay, c.Pin.URL, logkey.Err, err)
		return
	}
	l.log.Warn("relay receive position reset: pulling again from 0", logkey.Relay, c.Pin.URL, logkey.Reason, why.String(), logkey.Epoch, p.Epoch, logkey.Repush, n, logkey.Resent, resent)
	if n+resent > 0 {
		l.host.KickOutbox()
	}
	poke(l.keep)
}

// source is the relay client of c as the receiver sees it: it records pull failures as problems
// and a changed relay key as a stop.
func (l *Link) source(c *Conn) Source {
	return Source{Client: c.Client,
		ObservePull: func(ctx context.Context, err error) {
			l.host.Reached(ctx, err)
			var ee *relayclient.EpochError
			switch {
			case err == nil:
				l.problem(c, OpPull, nil)
			case errors.As(err, &ee):
			case ctx.Err() != nil:
			default:
				_ = l.failed(c, OpPull, err) // recorded; nothing waits on this error
			}
		},
		ObserveAck: func(err error) {
			var kc *relayclient.KeyChangedError
			if errors.As(err, &kc) {
				l.keyChanged(c, kc)
			}
		},
	}
}

// Receive pulls and processes pages until the relay has nothing more (tests and `relay status`
// probes; the daemon runs the receiver's own loop). It returns the items done.
func (l *Link) Receive(ctx context.Context) (int, error) {
	c, err := l.Conn()
	if err != nil {
		return 0, err
	}
	r, err := l.Receiver(c, checkpoint.ReceiverOptions{})
	if err != nil {
		return 0, err
	}
	done := 0
	for range 1000 {
		st, err := r.Step(ctx)
		done += st.Done()
		if err != nil {
			if errors.Is(err, relayclient.ErrNotEnrolled) {
				if kerr := l.Keep(ctx, true); kerr == nil {
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
