package relaylink

import (
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/outbox"
)

// Receipts a restore lost (docs/design.md: Epochs, restarts and restores, Delivery receipts).
//
// A delivery receipt row ends done when the relay accepts it: nothing answers a receipt. A relay
// restored from a backup (a new epoch) or whose store went back (a rewind) has lost the receipts
// it accepted after the backup. Their senders still wait (the rows stay relay-accepted until a
// receipt, else until their deadline, then alert "unconfirmed" for mail that arrived), and the
// senders' re-push does not bring a receipt back when the message itself survived the restore
// and this host had acked it before: the re-push is a duplicate this host never pulls again
// (found by package sim, seed 174). So, with the re-push of its own rows, this host queues again
// the current receipt of every message whose last receipt the relay accepted under another epoch
// (any epoch after a rewind) within the senders' wait (the relay's retention and the outbox
// grace). A sender that has its receipt already takes the repeat as stale.

// resendLostReceiptsTx queues those receipts again in tx and returns how many it queued. It reads
// every outbox row (an epoch change or a rewind is rare).
func (l *Link) resendLostReceiptsTx(tx *bbolt.Tx, relay, epoch string, retention time.Duration) (int, error) {
	rows, err := l.ob.In(tx).List(outbox.Filter{})
	if err != nil {
		return 0, err
	}
	since := l.clock().Add(-retention - outbox.DefaultGrace)
	var lost []outbox.Row
	for _, r := range rows {
		if r.Kind == outbox.KindReceipt && r.State == outbox.StateDone && r.Transport == outbox.TransportRelay &&
			r.Relay == relay && (epoch == "" || r.Epoch != epoch) && !r.EndedAt.Before(since) {
			lost = append(lost, r)
		}
	}
	return l.resendReceiptsTx(tx, lost)
}

// resendReceiptsTx queues again in tx the current receipts of the messages the receipt rows name,
// once per message and origin, and returns how many it queued.
func (l *Link) resendReceiptsTx(tx *bbolt.Tx, receipts []outbox.Row) (int, error) {
	type msgFrom struct{ msg, origin string }
	seen := map[msgFrom]bool{}
	n := 0
	for _, r := range receipts {
		k := msgFrom{r.MsgID, r.Host}
		if seen[k] {
			continue
		}
		seen[k] = true
		m, err := l.host.ResendReceipts(tx, r.MsgID, r.Host)
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// Acceptances recorded late (docs/design.md: Epochs, restarts and restores).
//
// An epoch change flags every relay-accepted row of another epoch for a re-push, and queues again
// the receipts accepted in another epoch, in one transaction. A push answered by the relay before
// a restore can be recorded after that transaction: the pacer and the record take time, and the
// receiver may learn the new epoch meanwhile. Recorded as it came, such a row would wait in the
// old epoch for a receipt the restored relay cannot bring, and nothing would flag it again (found
// by the soak: a message relay-accepted once, never delivered). So the transaction that records
// acceptances ends with StaleAcceptsTx, which keeps the rule: no row rests relay-accepted, and no
// receipt rests done, in an epoch other than the one the relay record holds.

// StaleAcceptsTx checks the rows just recorded as relay-accepted in tx (recorded, as the outbox
// returned them) against the epoch in the relay record. Those accepted by the pinned relay in
// another epoch are treated as an epoch change treats them: a message row is flagged for a
// re-push, a receipt is queued again. It returns how many rows it flagged or queued (the caller
// wakes the outbox when it is not 0).
func (l *Link) StaleAcceptsTx(tx *bbolt.Tx, recorded []outbox.Row) (int, error) {
	s, err := LoadTx(tx)
	if err != nil || s == nil || s.Epoch == "" {
		return 0, err
	}
	var receipts []outbox.Row
	repush := false
	for _, r := range recorded {
		if r.Transport != outbox.TransportRelay || r.Relay != s.URL || r.Epoch == s.Epoch {
			continue
		}
		switch {
		case r.Kind == outbox.KindReceipt && r.State == outbox.StateDone:
			receipts = append(receipts, r)
		case r.State == outbox.StateRelayAccepted && !r.Repush:
			repush = true
		}
	}
	n, err := l.resendReceiptsTx(tx, receipts)
	if err != nil || !repush {
		return n, err
	}
	m, err := l.ob.In(tx).RepushRelay(s.URL, s.Epoch)
	return n + m, err
}
