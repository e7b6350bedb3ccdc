// Package outbox is the host's sender state machine: one row per (item, target host), stored in
// bbolt next to the rest of the host's state, so that a message is never lost between "send"
// answering and the target confirming, and never re-sealed on a retry.
//
// # Rows
//
// A row is one item for one target host: a sealed envelope (kind "envelope", item id = message
// id) or a delivery receipt pushed through the relay (kind "receipt", item id
// "receipt:<msg>:<recipient>:<seq>"). Add stores the row together with its wire bytes before the
// first attempt; every later read returns exactly those bytes, so a retry through the relay is a
// duplicate there, never a conflict. Hosts are named as this host pinned them; the row also keeps
// the target's host key, which relay pushes address.
//
// # States
//
//	pending ──► relay-accepted ──► expired | unconfirmed | rejected ──► done
//	   │                                                                 ▲
//	   └──────────────────────────────(delivered / receipt)─────────────┘
//
// In words:
//
//   - pending: due for sending at next_at. A failed attempt (MarkAttemptFailed) backs off
//     min(5 s · 2^attempts, 1 h); a retryable rejection (MarkRejected, quota or rate) too.
//     A LAN delivery (MarkDelivered) or a delivery receipt (Settle) ends it done; a relay accept
//     statement (MarkRelayAccepted) makes it relay-accepted; a final rejection ends it rejected;
//     72 h after creation Sweep ends it expired.
//   - relay-accepted: the relay durably holds it. Not due, never sent over the LAN. Its deadline
//     is accepted_at + retention + 24 h; Sweep ends it unconfirmed after that. Its delivery
//     receipt (Settle) ends it done; the relay's expiry notice (MarkExpired) ends it expired.
//   - expired, unconfirmed, rejected: ended without delivery; the sender gets an alert
//     (AlertFor). Only a late delivery receipt still moves them, to done.
//   - done: delivered. Nothing leaves it.
//
// Receipt rows end done as soon as the relay or the peer accepts them; they never alert.
//
// Transitions only go forward. An operation that does not fit the row's state returns a
// *TransitionError (errors.Is(err, ErrTransition)) and changes nothing; so does bad input
// (ErrInvalid) and a missing row (ErrNotFound).
//
// # Transactions
//
// Store methods each run in a transaction of their own. Every operation also exists on Tx,
// which works inside a transaction the caller opened, so outbox changes commit together with the
// caller's own buckets (an accept statement's verification and the move to relay-accepted; a
// delivery receipt and the row it settles):
//
//	err := db.Update(func(tx *bbolt.Tx) error {
//		if err := receipts.Put(tx, rec); err != nil { // the host's own bucket
//			return err
//		}
//		_, _, err := store.In(tx).Settle(rec.Msg, peer)
//		return err
//	})
//
// Store.Add goes through bbolt's Batch, so concurrent senders share one fsync while each is
// still answered only after its commit.
//
// # Indexes
//
// Next to the rows, the outbox keeps indexes that every operation updates in the same
// transaction, so no pass reads rows it does not need:
//
//   - due (next_at, key): pending rows and relay-accepted rows flagged for re-push. Due and
//     Claim walk it from the start up to now: O(due rows), however many rows wait or ended.
//     DueWith bounds the walk by rows and wire bytes and passes over chosen hosts.
//   - host (host, key): active rows per host. MakeDue (a verified inbound hop from the host:
//     make its rows due now) and RebindHost (the peer rotated its key) walk only that host's.
//   - relay (relay, key): relay-accepted rows per relay, for RelayAccepted and RepushRelay.
//   - deadline (deadline, key): active rows, for Sweep.
//   - ended (ended_at, key): ended rows, for Prune.
//
// Tx.Check verifies all of them against the rows.
//
// # Relay epochs
//
// When the relay shows a new epoch, its store may have lost items it accepted. RepushRelay(relay,
// epoch) flags every relay-accepted row at that relay accepted under another epoch: the row stays
// relay-accepted (its delivery receipt still settles it, its deadline stands, the LAN is still
// never used for it) and becomes due like a pending row. The daemon pushes its stored wire bytes
// again; the new accept statement (MarkRelayAccepted) records the new epoch and seq and clears
// the flag. Relay dedup makes the repeat harmless where the item survived.
//
// # Time
//
// The clock is injected (Options.Clock) and read once per operation; times are kept with
// millisecond precision in UTC. Nothing in the package sleeps or starts goroutines: the daemon
// calls Due or Claim, Sweep and Prune from its own loops (NextDue says when the next row is due).
//
// # Caveats
//
//   - Host names are compared exactly; pass the pinned peer's spelling everywhere.
//   - Due does not lease rows. Two loops that send concurrently should use Claim.
//   - A row can move on while an attempt is in flight (a delivery receipt settles it, Sweep ends
//     it). Recording that attempt's outcome then returns a *TransitionError: nothing to undo,
//     the row is already where it belongs.
//   - Wire bytes stay until Prune deletes the ended row; active rows are never pruned.
//   - The listing (List without Active) reads every row; `agentmbx outbox` should prune.
package outbox
