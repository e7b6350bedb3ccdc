package relayserver

import (
	"context"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// What the relay stores for a key beyond its queue: the dedup rows its pushes leave (docs/design.md:
// Quotas and bounds, "Disk"). Every dedup row is charged to its sender, against the sender's cap
// of rows (Options.MaxSenderDedup) and, at DedupRowBytes each, against the relay-wide byte limit.
const (
	// RejectSenderDedup is the rejection of an item whose sender holds Options.MaxSenderDedup
	// dedup rows already. Retryable: the sweep prunes the sender's rows past the honest retry
	// horizon (HonestRetryHorizon), which makes room.
	RejectSenderDedup = "quota:sender_dedup"
	// DefaultMaxSenderDedup is the default cap of dedup rows per sender key: at a sender's
	// shortest horizon (HonestRetryHorizon, 16 days by default) 6,250 items a day, at the full
	// horizon 2,857; about 16 MB of disk (DedupRowBytes each).
	DefaultMaxSenderDedup = 100_000
	// DedupRowBytes is what one dedup row is charged on the relay-wide byte limit: its disk cost.
	// Measured in the SQLite store, 60,000 tombstones with 14-character item ids took 140–142
	// bytes each (the row, its two indexes, page overhead); a 26-character ULID adds about 20.
	DedupRowBytes = 160
	// retryGraceSkew is what HonestRetryHorizon adds for the host's and the relay's clocks
	// disagreeing and for a retry in flight at the host's deadline.
	retryGraceSkew = 24 * time.Hour
	// hostPendingDeadline is how long a host keeps pushing an item no relay has accepted (its
	// outbox row's deadline while pending: outbox.DefaultLANDeadline).
	hostPendingDeadline = 72 * time.Hour
)

// HonestRetryHorizon is the oldest a dedup row can be when an honest host (default outbox
// settings) retries its item. A host pushes an item again only while its outbox row is active:
// pending (no accept seen: a lost answer) until 72 hours after the row was made, which is before
// the relay first accepted it; relay-accepted (re-pushed after a new epoch) until the accept
// statement's time, the relay's first acceptance, plus retention plus mbx.RelayDeadlineGrace.
// A day more covers the two clocks disagreeing. Rows younger than this are never pruned,
// whatever their sender holds, so an honest retry always finds its row (docs/design.md: Disk).
func HonestRetryHorizon(retention time.Duration) time.Duration {
	return max(retention+mbx.RelayDeadlineGrace, hostPendingDeadline) + retryGraceSkew
}

// KeyUsage is what the store holds for one host key.
type KeyUsage struct {
	Pubkey string
	// Queue is what the key's own queue holds (items for it, from any sender).
	Queue Counts
	// Sent is what the key's items hold in all queues (its own included).
	Sent Counts
	// DedupRows counts the dedup rows charged to the key as a sender (tombstones included).
	DedupRows int64
	// Enrolment is the key's enrolment (zero when the relay holds none).
	Enrolment Enrolment
}

// Charged is the disk the key is charged: its queue's wire bytes and its dedup rows.
func (u KeyUsage) Charged() int64 { return u.Queue.Bytes + u.DedupRows*DedupRowBytes }

// UsageReport is what the store holds, in total and for the keys charged the most.
type UsageReport struct {
	// Queued is what all queues hold; DedupRows counts every dedup row.
	Queued    Counts
	DedupRows int64
	// Keys are the topN keys by Charged, largest first.
	Keys []KeyUsage
}

// Charged is the total counted against the relay-wide byte limit.
func (r UsageReport) Charged() int64 { return r.Queued.Bytes + r.DedupRows*DedupRowBytes }

// UsageReporter is implemented by the stores: what uses the space, per key (`agentmbx relay
// usage`), and the dedup rows the relay-wide limit counts.
type UsageReporter interface {
	// DedupRows counts the dedup rows of every sender.
	DedupRows(ctx context.Context) (int64, error)
	// Usage reports the totals and the topN keys charged the most, from one snapshot.
	Usage(ctx context.Context, topN int) (UsageReport, error)
}

// ReclaimResult is what Tx.Reclaim deleted for a key.
type ReclaimResult struct {
	// Keys counts the keys reclaimed (set by ApplyReclaim; Tx.Reclaim leaves it 0).
	Keys int64 `json:"keys,omitempty"`
	// Items and Bytes count the deleted queued items: the key's own queue and what it sent.
	Items int64 `json:"items"`
	Bytes int64 `json:"bytes"`
	// DedupRows counts the deleted dedup rows of the key as a sender.
	DedupRows int64 `json:"dedup_rows"`
}

// Add adds o to r.
func (r *ReclaimResult) Add(o ReclaimResult) {
	r.Keys, r.Items, r.Bytes, r.DedupRows = r.Keys+o.Keys, r.Items+o.Items, r.Bytes+o.Bytes, r.DedupRows+o.DedupRows
}
