// Package checkpoint is the receiving side of a relay (docs/design.md: Receive checkpoint and ack,
// Epochs, restarts and restores): it takes pulled pages, hands their items to the host strictly in
// seq order, quarantines what the host rejects, and keeps the receive checkpoint — per relay,
// (epoch, received_through) — so that a crash, a repeated page or a relay restore never loses or
// duplicates an item.
//
// # The checkpoint
//
// received_through is the highest relay seq this host has durably processed, contiguously from
// the start of the relay's epoch. Store.ProcessPage runs one bbolt transaction per page: the
// Handler (the host) stores each item in that transaction, rejected items go to the quarantine in
// it, and the new received_through is written in it too. So the items and the checkpoint that
// moves past them commit together: after a crash, either both are there or neither is, and an
// item whose effects were lost is pulled again.
//
// Only after ProcessPage returned does the caller ack the relay through received_through. An ack
// that is lost costs nothing: the next pull starts at received_through, and the relay still holds
// what was not acked.
//
// # Order, repeats and failures
//
// Items are processed in seq order whatever order the page lists them in. Items at or below
// received_through are skipped, so a repeated or overlapping page changes nothing. When the
// Handler fails on an item (an error, not a verdict), the items before it commit and the
// checkpoint stops just before it: nothing after a failed item is ever marked done. The page is
// then rolled back and redone without the failed item, so a Handler must keep every effect inside
// the transaction it is given (and use tx.OnCommit for anything that must wait for the commit).
//
// # Epochs and rewinds
//
// A page of another epoch, or a head_seq below received_through in the same epoch (a store
// restored without a new epoch), resets the position to 0 and is reported in Result.Reset: the
// receiver pulls everything again (its dedup by message id makes repeats harmless), and the host
// re-pushes its relay-accepted rows as a sender. A relay's BAD_ACK is the same rewind seen at ack
// time (Store.Reset with ResetBadAck).
//
// # The receive loop
//
// A Receiver ties it together for one relay: pull after the committed position (with the epoch
// once past 0, and a long-poll wait when asked), ProcessPage, then ack through the committed
// received_through. A 409, a page of another epoch, a rewind or a BAD_ACK resets the position
// and calls OnReset; a relay that no longer knows the host key calls Reenrol; a changed relay
// key ends Run. Failed steps back off (honouring Retry-After). The failpoint
// FailAfterCommitBeforeAck lets crash tests kill a receiver between its commit and its ack.
//
// # Storage
//
// Positions live in the host's bbolt file under the top-level bucket "relay-positions"; rejected
// items under the quarantine package's bucket.
package checkpoint
