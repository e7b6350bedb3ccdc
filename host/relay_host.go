package host

import (
	"context"
	"errors"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relaylink"
)

// The host's side of package relaylink (docs/design.md: Receive checkpoint and ack, Delivery
// receipts): a relaylink.Link keeps the relay record, enrols, pushes, pulls and runs the daemon's
// relay loops; relayHost is what it needs of this host: the peers, the mailbox commit of a relay
// item inside its page's transaction, the alerts, and waking the loops. The Link itself answers
// api.RelayService (Host.Relay, and in Host.Service).

// relayHost is the relaylink.Host of a Host.
type relayHost struct{ *Host }

var _ relaylink.Host = relayHost{}

// Peers lists the pinned peers, read in tx.
func (rh relayHost) Peers(tx *bbolt.Tx) ([]relaylink.Peer, error) {
	ps, err := peersTx(tx)
	if err != nil {
		return nil, err
	}
	out := make([]relaylink.Peer, len(ps))
	for i, p := range ps {
		out[i] = relaylink.Peer{Host: p.Host, Key: p.HostPubkey, Retired: p.RetiredKeys}
	}
	return out, nil
}

// Receipt applies a delivery receipt the paired host peer pushed (acceptReceiptTx).
func (rh relayHost) Receipt(tx *bbolt.Tx, peer string, wire []byte) (checkpoint.Verdict, error) {
	_, st, refusal, err := rh.acceptReceiptTx(tx, wire, peer)
	if err != nil {
		return checkpoint.Verdict{}, err
	}
	return receiptVerdict(st, refusal), nil
}

// Alert leaves the alert of a row that ended undelivered in its sender's mailbox.
func (rh relayHost) Alert(tx *bbolt.Tx, row outbox.Row) error {
	_, err := rh.alertTx(tx, row) // the mail store wakes the waiters at the commit
	return err
}

func (rh relayHost) KickOutbox()                            { rh.kickOutbox() }
func (rh relayHost) Wake()                                  { rh.kickOutbox() } // the mail store wakes the waiters
func (rh relayHost) Reached(ctx context.Context, err error) { rh.relayReached(ctx, err) }

// senderPeerTx finds the pinned peer that pushed an item (by its current or a retired key).
func senderPeerTx(tx *bbolt.Tx, key string) (PeerRecord, bool, error) {
	peers, err := peersTx(tx)
	if err != nil {
		return PeerRecord{}, false, err
	}
	for _, p := range peers {
		if p.HostPubkey == key || slices.Contains(p.RetiredKeys, key) {
			return p, true, nil
		}
	}
	return PeerRecord{}, false, nil
}

// relayHold holds the relay while this host's key rotation has relay steps left
// (relaylink.Config.Hold).
func (h *Host) relayHold() error { return h.rot.Hold() }

func (rh relayHost) Daemon() bool {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	return rh.daemon
}

// Envelope is the host's receive path for an envelope item pushed to the relay: a rotation
// notice goes to rotation.Rotation.Notice; mail from a paired host (by its current or a retired key)
// goes through prepareEnvelope and commitEnvelopeTx, exactly like LAN mail (dedup by message id),
// in the transaction of the item's page. A repeat is done, and re-sends the current delivery
// receipt of every local copy whose last receipt is no longer on its way, because a sender
// re-pushes only when it still waits for one (after an epoch change).
func (rh relayHost) Envelope(tx *bbolt.Tx, it checkpoint.Item) (checkpoint.Verdict, error) {
	h := rh.Host
	if mbx.IsRotationNotice(it.Wire) {
		return h.rot.Notice(tx, it.ItemID, it.Sender, it.Wire)
	}
	peer, ok, err := senderPeerTx(tx, it.Sender)
	if err != nil {
		return checkpoint.Verdict{}, err
	}
	if !ok {
		return checkpoint.Rejected(quarantine.CauseUnpaired, ReasonUnpaired), nil
	}
	in, err := h.prepareEnvelope(peer, it.Wire, true, api.ViaRelay)
	if err != nil {
		st, _ := rejected(err)
		reason := strings.TrimPrefix(st, mbx.StatusRejectedPrefix)
		return checkpoint.Rejected(causeOf(reason), reason), nil
	}
	if in.Env.ID != it.ItemID {
		return checkpoint.Rejected(quarantine.CauseMalformed, "item id is not the envelope id"), nil
	}
	if mbx.IsReceiptsEnvelope(in.Env, peer.Host, h.name) {
		return h.receiptsEnvelopeTx(tx, peer, in)
	}
	st, err := h.commitEnvelopeTx(tx, in)
	if err != nil {
		if s, ok := rejected(err); ok {
			reason := strings.TrimPrefix(s, mbx.StatusRejectedPrefix)
			return checkpoint.Rejected(causeOf(reason), reason), nil
		}
		return checkpoint.Verdict{}, err
	}
	if st == mbx.StatusDuplicate {
		n, err := h.resendReceiptsTx(tx, in.Env.ID, peer.Host)
		if err != nil {
			return checkpoint.Verdict{}, err
		}
		if n > 0 {
			tx.OnCommit(h.kickOutbox)
		}
		return checkpoint.Duplicate(), nil
	}
	if err := failpoint.Inject(FailRelayHandledBeforeCommit); err != nil {
		return checkpoint.Verdict{}, err
	}
	tx.OnCommit(h.kickOutbox) // receipts were queued; the mail store wakes the waiters
	return checkpoint.Accepted(), nil
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

// resendReceiptsTx queues again the current delivery receipt of each local copy of message msgID
// from origin whose last receipt is no longer on its way (its row ended or was pruned): the
// sender re-pushed the message, so it still waits for one. Each re-send takes the next seq, so
// the sender's acceptReceipt takes it. It returns how many it queued.
func (h *Host) resendReceiptsTx(tx *bbolt.Tx, msgID, origin string) (int, error) {
	msg, found, err := mailstore.MessageTx(tx, msgID)
	if err != nil || !found || msg.Origin != origin {
		return 0, err
	}
	agents, err := h.expandIncomingTx(tx, msg.To)
	if err != nil {
		return 0, err
	}
	ob := h.ob.In(tx)
	return h.mail.ResendReceiptsTx(tx, msgID, origin, agents, func(agent string, seq int64) (bool, error) {
		last := mbx.ReceiptItemID(msgID, agent+"@"+h.name, seq)
		r, err := ob.Get(outbox.Key{ItemID: last, Host: origin})
		if err != nil && !errors.Is(err, outbox.ErrNotFound) {
			return false, err
		}
		return err == nil && r.State.Active(), nil
	})
}

// ResendReceipts queues again the current receipts of msg from origin (resendReceiptsTx).
func (rh relayHost) ResendReceipts(tx *bbolt.Tx, msg, origin string) (int, error) {
	return rh.resendReceiptsTx(tx, msg, origin)
}
