package mailstore

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/failpoint"
)

// FailSkipDedup is the failpoint that turns off the receiver's dedup, for the self-tests of the
// oracles that count deliveries (the simulation, the soak, the demo): enabled with the error
// action, the host stores a repeat of a message it already received as if it were new, and
// DeliverTx puts a copy an agent already holds again, in state delivered. Such a repeat shows
// as a delivery count above 1 and as a copy gone back to unread. Never enabled outside tests.
const FailSkipDedup = "host.skip-dedup"

// SkipDedup reports whether FailSkipDedup is enabled.
func SkipDedup() bool { return failpoint.Inject(FailSkipDedup) != nil }

// DeliveriesTx is how many times agent's copy of message id was put in its mailbox: 1 for every
// copy delivered once, as every copy should be; 0 when the agent holds no copy, or the copy was
// delivered before the store kept the count.
func DeliveriesTx(tx *bbolt.Tx, agent, id string) int {
	v := tx.Bucket(bucketDeliveries).Get(key(agent, id))
	if len(v) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(v))
}

// countDeliveryTx adds one to the delivery count of the copy k (agent ‖ id).
func countDeliveryTx(tx *bbolt.Tx, k []byte) error {
	b := tx.Bucket(bucketDeliveries)
	n := uint64(0)
	if v := b.Get(k); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%w: delivery count of %q is %d bytes", api.ErrCorrupt, k, len(v))
		}
		n = binary.BigEndian.Uint64(v)
	}
	return b.Put(k, binary.BigEndian.AppendUint64(nil, n+1))
}
