// Package outbox is the host's sender state machine: one row per (item, target host), stored in
// bbolt next to the rest of the host's state, so that a message is never lost between "send"
// answering and the target confirming, and never re-sealed on a retry. It also defines Sender,
// the interface a transport (the LAN, the relay) implements for the outbox loop.
//
// A row is a sealed envelope (item id = message id) or a delivery receipt (item id
// "receipt:<msg>:<recipient>:<seq>") for one target host, named as this host pinned it, with the
// target's host key. Add stores the row with its wire bytes before the first attempt; every read
// returns exactly those bytes, so a retry through the relay is a duplicate, never a conflict.
//
// # States
//
//		pending ──► relay-accepted ──► expired | unconfirmed | rejected ──► done
//		   │                                                                 ▲
//		   └──────────────────────────────(delivered / receipt)─────────────┘
//
//	  - pending: due at next_at; a failed attempt or a retryable rejection backs off
//	    min(5 s · 2^attempts, 1 h). A LAN delivery or a delivery receipt ends it done, a relay
//	    accept statement makes it relay-accepted, a final rejection ends it rejected, and 72 h
//	    after creation Sweep ends it expired.
//	  - relay-accepted: the relay holds it; never sent over the LAN. Its delivery receipt ends it
//	    done, the relay's expiry notice expired, and Sweep ends it unconfirmed at accepted_at +
//	    retention + 24 h. RepushRelay flags the rows of a relay that changed epoch: they stay
//	    relay-accepted and are due again, so their bytes are pushed again.
//	  - expired, unconfirmed, rejected: ended without delivery; the sender gets an alert
//	    (AlertFor). Only a late delivery receipt still moves them, to done.
//
// Receipt rows end done as soon as the relay or the peer accepts them; they never alert.
// Transitions only go forward: an operation that does not fit the row's state returns a
// *TransitionError (ErrTransition) and changes nothing, as do bad input (ErrInvalid) and a
// missing row (ErrNotFound).
//
// # Transactions and time
//
// Store methods each run in a transaction of their own; every operation also exists on Tx
// (Store.In), which works inside a transaction the caller opened, so outbox changes commit with
// the caller's own writes (an accept statement's check and the move to relay-accepted; a
// delivery receipt and the row it settles). Store.Add goes through bbolt's Batch, so concurrent
// senders share one fsync while each is answered only after its commit. Indexes kept in the same
// transactions (due, per host, per relay, deadline, ended, created; Tx.Check verifies them) make a pass
// read only the rows it needs. The clock is injected and read once per operation; nothing here
// sleeps or starts goroutines: the daemon calls Claim, Sweep and Prune from its own loops.
//
// Due does not lease rows (two concurrent senders use Claim); a row may move on while an attempt
// is in flight, and recording that outcome then returns a *TransitionError with nothing to undo.
// Wire bytes stay until Prune deletes the ended row.
package outbox
