package host

import (
	"strconv"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/host/ops"
)

// Ops is what operators watch on this host (package host/ops): its counters, its readiness
// (Ready, and Handler for GET /healthz and /readyz) and its state for metrics (Snapshot).
func (h *Host) Ops() *ops.Ops { return h.ops }

func (h *Host) newOps() *ops.Ops {
	return ops.New(ops.Config{Outbox: h.ob, RelayStatus: h.relay.RelayStatus, Logger: h.log, Reach: h.reachStatus,
		Serving: func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.daemon && !h.closed
		},
		// The readiness probe: the time, into the meta bucket.
		Write: func() error {
			return h.db.Update(func(tx *bbolt.Tx) error {
				return tx.Bucket(bucketMeta).Put([]byte("ready_probe"), []byte(strconv.FormatInt(h.clock().UnixMilli(), 10)))
			})
		}})
}
