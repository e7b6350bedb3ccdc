package host

import (
	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

// Delivery receipts that came through a v1 relay (relaylink/v1.go, mbx.ReceiptsDraft): a v1
// relay carries envelopes only, so a peer that reaches this host only through one sends the
// receipts it owes inside a sealed receipts envelope from mbx@<peer> to mbx.receipts@<this
// host>. The envelope passed the receive path's checks (a paired sender, its signature, the
// opening); each receipt in it is applied as a receipt item from that peer would be.

// receiptsEnvelopeTx applies, in tx, the receipts that in carries from peer. It is accepted when
// one of them was, a duplicate when all were already known; a body that is not receipts, or a
// receipt the rules refuse, is rejected (the item goes to the quarantine).
func (h *Host) receiptsEnvelopeTx(tx *bbolt.Tx, peer PeerRecord, in *incoming) (checkpoint.Verdict, error) {
	wires, err := mbx.Receipts(in.msg.Body)
	if err != nil {
		return checkpoint.Rejected(quarantine.CauseMalformed, err.Error()), nil
	}
	accepted := false
	for _, w := range wires {
		_, st, refusal, err := h.acceptReceiptTx(tx, w, peer.Host)
		if err != nil {
			return checkpoint.Verdict{}, err
		}
		switch v := receiptVerdict(st, refusal); v.Outcome {
		case checkpoint.OutcomeAccepted:
			accepted = true
		case checkpoint.OutcomeRejected:
			return v, nil
		}
	}
	if !accepted {
		return checkpoint.Duplicate(), nil
	}
	tx.OnCommit(h.kickOutbox) // settled rows may end waits; the outbox loop re-reads
	return checkpoint.Accepted(), nil
}
