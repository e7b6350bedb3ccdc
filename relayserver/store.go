package relayserver

import (
	"context"
	"time"
)

// Store is everything the relay keeps. The relay core reaches its state only through this interface
// (docs/design.md: The relay store), so a backend other than SQLite can replace the one in
// sqlitestore without touching the protocol.
//
// Writes go through Update; every other method is a read of committed state. A backend must make
// each Update's effects durable before Update returns nil, and must never report an effect as
// committed that a crash could still lose.
type Store interface {
	// Update runs fn as one atomic unit inside a write transaction and returns after that
	// transaction has committed. Backends may commit the units of several concurrent callers
	// together (group commit); each unit stays atomic on its own: when fn returns an error, its
	// effects are rolled back, the other units of the group are unaffected, and Update returns
	// fn's error. When the shared commit fails, every unit in it fails with an error wrapping
	// ErrCommit and nothing of any of them is stored.
	//
	// fn runs on the backend's writer and must not block on anything but the Tx; it may run
	// nested atomic units with Tx.Unit. A backend may run fn more than once (after rolling back
	// what an earlier run did, e.g. to re-run a group without a failed unit): fn must set
	// everything it reports from scratch on each run.
	Update(ctx context.Context, fn func(Tx) error) error

	// Meta returns the store's identity: epoch, relay key, schema version, heartbeat.
	Meta(ctx context.Context) (Meta, error)
	// BindRelayKey records pubkey as the store's relay key when it has none yet, and fails with
	// ErrRelayKeyMismatch when the store already belongs to another key.
	BindRelayKey(ctx context.Context, pubkey string) error
	// RotateEpoch gives the store a new random epoch (docs/design.md: Epochs, restarts and
	// restores: after a restore) and returns it.
	RotateEpoch(ctx context.Context) (string, error)
	// Heartbeat records now as the store's heartbeat (docs/design.md: Epochs, restarts and
	// restores).
	Heartbeat(ctx context.Context, now time.Time) error
	// ChallengeSecret returns the store's secret for enrolment challenges: at least 32 random
	// bytes, made by the first call and the same for every later call and every relay process
	// sharing the store. It never leaves the relay.
	ChallengeSecret(ctx context.Context) ([]byte, error)

	// Enrolment returns the enrolment of a host key, or ErrNotFound.
	Enrolment(ctx context.Context, pubkey string) (Enrolment, error)
	// EnrolmentsByName returns up to limit live enrolments whose name matches name
	// case-insensitively, in enrolment order.
	EnrolmentsByName(ctx context.Context, name string, limit int) ([]Enrolment, error)
	// EncAd returns the stored enc-key advertisement of a host key, or ErrNotFound.
	EncAd(ctx context.Context, pubkey string) (EncAd, error)
	// SenderList returns the sender allowlist a target published, or ErrNotFound.
	SenderList(ctx context.Context, target string) (SenderList, error)
	// Head returns the queue position of a target (zero values for a target with no history).
	Head(ctx context.Context, target string) (Head, error)
	// Pull returns, from one consistent snapshot, the target's head and the items with seq >
	// after in seq order: at most limit items and, past the first item, no more than maxBytes of
	// wire bytes in total. More reports whether items remain after the page.
	Pull(ctx context.Context, target string, after int64, limit int, maxBytes int64) (Page, error)

	// Totals returns what the queues of all targets hold together.
	Totals(ctx context.Context) (Counts, error)

	// DenyList returns every entry of the operator's deny list, ended ones included.
	DenyList(ctx context.Context) ([]DenyEntry, error)

	// Close waits for pending updates and releases the store.
	Close() error
}

// Notifier is implemented by a Store that several relay processes share (pgstore). New subscribes
// the server's parked pulls to it: the store calls fn with a target key after any process
// committed an item for it (or a rotation of it), and with "" when it may have missed some (after
// a reconnect, and periodically as a bounded re-check); the server then wakes the pulls parked for
// that key, or all of them, and each reads again. cancel ends the subscription.
type Notifier interface {
	Subscribe(fn func(target string)) (cancel func())
}

// SpaceReporter is implemented by a Store that can run short of disk space. SpaceLow reports
// that a write failed for want of space and the store has released its reserve to keep deletes
// working; it turns false once enough space is free again. The relay refuses pushes while it is
// true, so acks and the sweep can free space.
type SpaceReporter interface {
	SpaceLow() bool
}

// Tx is the write side of a Store, valid only inside the Update callback that received it.
type Tx interface {
	// Unit runs fn as a nested atomic unit: when fn fails, only its own effects are undone.
	Unit(fn func(Tx) error) error

	// Enrolment returns the enrolment of a host key, or ErrNotFound.
	Enrolment(pubkey string) (Enrolment, error)
	// PutEnrolment inserts or replaces the enrolment of e.HostPubkey. It fails with ErrNameTaken
	// when another live enrolment of the same non-empty account carries the same name
	// (case-insensitively).
	PutEnrolment(e Enrolment) error
	// LiveEnrolments counts enrolments that are not revoked.
	LiveEnrolments() (int64, error)

	// EncAd returns the stored enc-key advertisement of a host key, or ErrNotFound.
	EncAd(pubkey string) (EncAd, error)
	// PutEncAd stores (replaces) the enc-key advertisement of ad.HostPubkey.
	PutEncAd(ad EncAd) error
	// SenderList returns the allowlist of target, or ErrNotFound.
	SenderList(target string) (SenderList, error)
	// PutSenderList stores (replaces) the allowlist of l.TargetPubkey.
	PutSenderList(l SenderList) error
	// SenderAllowed reports whether target accepts pushes from sender: true when target has no
	// allowlist, else whether sender is on it.
	SenderAllowed(target, sender string) (bool, error)

	// Admission reads, from the transaction's state and in one go, everything the relay checks
	// before it inserts an item of sender for target: the dedup row of (sender, itemID, target),
	// the target's enrolment, whether the target accepts sender, and the counts its quotas need.
	// It equals Dedup, Enrolment, SenderAllowed, Usage and AccountUsage called in turn, plus the
	// dedup rows charged to sender (SenderDedup).
	Admission(sender, itemID, target string) (Admission, error)
	// Dedup returns the dedup row of (sender, itemID, target), or ErrNotFound.
	Dedup(sender, itemID, target string) (Dedup, error)
	// Usage returns what target's queue holds in total and from sender.
	Usage(target, sender string) (Usage, error)
	// AccountUsage returns what the queues of all live hosts of account hold.
	AccountUsage(account string) (Counts, error)
	// InsertItem stores it for it.Target with a new seq = max(next_seq, AcceptedAt in ms), never
	// reused, plus its dedup row, and returns the seq. The caller checks dedup first; inserting an
	// existing (sender, item id, target) fails with ErrDuplicate.
	InsertItem(it Item) (int64, error)
	// Head returns the queue position of a target.
	Head(target string) (Head, error)
	// Ack deletes target's items with seq <= through and records acked_through. through beyond
	// the head fails with ErrBadAck and changes nothing.
	Ack(target string, through int64) (AckResult, error)
	// Rotate moves everything of r.OldPubkey to r.NewPubkey (docs/design.md: Host key rotation), in
	// the caller's unit, so a failure anywhere leaves both keys as they were. The rules:
	//
	//   - The old key must be enrolled (ErrNotFound). The new key must not be revoked
	//     (ErrRevoked); it may be unknown, and is then enrolled at r.At.
	//   - A retry is a no-op: when the old key is already revoked and the new key is live and
	//     named, Rotate changes nothing and returns a zero result. Any other revoked old key
	//     fails with ErrRevoked.
	//   - The old key is revoked at r.At first, so the new key can take its name inside the
	//     account. The new key gets r.HostName (the old name when empty) and the old OwnerFP; it
	//     takes the old Account, Org, AuthorizedBy and AuthorityRank unless its own authority
	//     ranks higher. A name taken in the account fails with ErrNameTaken.
	//   - The old queue moves in seq order after anything the new key already has: each item
	//     gets a new seq allocated as InsertItem would at r.At (never reused, never below the
	//     new key's head or r.At). An item the new key already holds (a dedup row of the same
	//     sender and item id) is a repeat and is dropped. MovedItems counts the moved items.
	//   - Dedup rows addressed to the old key stay (a retry still addressed to it is a
	//     duplicate with its original seq) and are copied to the new key, moved items naming
	//     their new seq; rows the new key already has win. Rows the old key wrote as a sender
	//     are re-keyed to the new key (dropped where the new key has the same row), so the
	//     host's retries under its new key stay duplicates.
	//   - The old key's allowlist moves to the new key unless the new key published its own; the
	//     old key keeps none. In other targets' allowlists the new key replaces the old one.
	//   - The usage counters of both queues are recounted; the old key's enc ad is deleted. The
	//     old key's head and acked_through stay as they were.
	Rotate(r Rotation) (RotateResult, error)

	// Reclaim deletes what the store holds for pubkey (docs/relay.md: Disk usage): the items
	// queued for it, the items it queued for others, its dedup rows as a sender, its enc-key ad
	// and its allowlist (and the key from other targets' allowlists stays). The usage counters
	// follow. Its enrolment, head and acked_through stay, so its seqs are never reused; the
	// dedup rows of other senders' items for it stay, charged to them.
	Reclaim(pubkey string) (ReclaimResult, error)

	DenyWriter
	// TakeReclaim marks the reclaim the entry of kind and value asks for (DenyEntry.ReclaimAt)
	// as done at at, and reports whether it was still to do: on a store shared by several
	// relays, exactly one takes it.
	TakeReclaim(kind DenyKind, value string, at time.Time) (bool, error)
	// ReclaimDone records what the reclaim of the entry of kind and value deleted.
	ReclaimDone(kind DenyKind, value string, res ReclaimResult) error
	// DeniedKeys returns the keys of the enrolments the deny list revoked that d matches.
	DeniedKeys(d DenyEntry) ([]string, error)
	// DenyRevoke sets DeniedAt to at on every enrolment that d matches (by host key fingerprint
	// or client_id) and that is live and not denied already, and returns their keys.
	DenyRevoke(d DenyEntry, at time.Time) ([]string, error)

	Expiry
}

// Expiry is the write side of the retention sweep (docs/design.md: Retention and expiry). It is
// part of Tx; the sweep runs it inside one Update, so the deletions, the tombstones it keeps and
// the notices it queues commit together.
type Expiry interface {
	// ExpiredItems returns up to limit items with ExpiresAt <= now, oldest expiry first, without
	// their wire bytes.
	ExpiredItems(now time.Time, limit int) ([]Item, error)
	// DeleteItem deletes target's item seq, takes it off the usage counters and returns its wire
	// size. Its dedup row stays as a tombstone, so a late retry of the item is a duplicate.
	// Deleting an item that is not there does nothing and returns 0.
	DeleteItem(target string, seq int64) (int64, error)
	// PruneDedup deletes up to limit dedup rows accepted at or before acceptedBefore whose item
	// is no longer queued, oldest first, and returns how many went. With minRows > 0 only the
	// rows of senders holding at least minRows dedup rows go (a sender over its cap). The
	// senders' dedup counters follow.
	PruneDedup(acceptedBefore time.Time, minRows int64, limit int) (int64, error)
}

// WirePuller is implemented by a Store that can read a page with only what a pull answer carries:
// PullWires is Pull with Item.WireHash, AcceptedAt and ExpiresAt left zero (and Target set), read
// into buf, which it resets first (nil: fresh memory). The pull handlers take it when the store has it.
type WirePuller interface {
	PullWires(ctx context.Context, target string, after int64, limit int, maxBytes int64, buf *PullBuf) (Page, error)
}

// PullBuf is memory a pull page is read into, reused from one pull to the next: a page read into
// it (its Items and their Wire bytes) is valid until the buffer is read into again or reset.
type PullBuf struct {
	Items []Item
	Wires []byte
}

// Reset empties b for the next page, keeping its memory.
func (b *PullBuf) Reset() {
	clear(b.Items) // no strings of the last page stay reachable through the pool
	b.Items, b.Wires = b.Items[:0], b.Wires[:0]
}

// AddWire appends wire to b's wire bytes and returns the copy.
func (b *PullBuf) AddWire(wire []byte) []byte {
	start := len(b.Wires)
	b.Wires = append(b.Wires, wire...)
	return b.Wires[start:len(b.Wires):len(b.Wires)]
}

// pullPage reads a page for a pull answer into buf, through PullWires when st has it.
func pullPage(ctx context.Context, st Store, target string, after int64, limit int, maxBytes int64, buf *PullBuf) (Page, error) {
	if wp, ok := st.(WirePuller); ok {
		return wp.PullWires(ctx, target, after, limit, maxBytes, buf)
	}
	return st.Pull(ctx, target, after, limit, maxBytes)
}
