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
	type msgFrom struct{ msg, origin string }
	seen := map[msgFrom]bool{}
	n := 0
	for _, r := range rows {
		if r.Kind != outbox.KindReceipt || r.State != outbox.StateDone || r.Transport != outbox.TransportRelay ||
			r.Relay != relay || (epoch != "" && r.Epoch == epoch) || r.EndedAt.Before(since) {
			continue
		}
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
