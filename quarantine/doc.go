// Package quarantine keeps the relay items a receiving host rejected, so that nothing pulled from
// a relay is ever dropped silently (docs/design.md: Receive checkpoint and ack, Quarantine).
//
// An item the host cannot accept — undecryptable, badly signed, malformed, of an unknown kind, or
// from a sender it has not paired with — is written here with its exact wire bytes and the reason,
// and only then counts as processed: the receive checkpoint moves past it and the relay may delete
// it. `agentmbx relay quarantine` and doctor list what is held.
//
// # Transactions
//
// The quarantine lives in the host's bbolt file under its own top-level bucket "quarantine". Every
// operation runs on a *bbolt.Tx the caller owns (Store.In), so the quarantine write commits in the
// same transaction as the receive checkpoint that moves past the item: either both are durable or
// neither is. Store.View and Store.Update are conveniences for callers with nothing else to write.
//
// # Identity
//
// An entry is addressed by where it was pulled from: (relay, epoch, seq). The same item quarantined
// again — the same relay, sender, item id and wire bytes, pulled again after an epoch change or a
// rewind — is recognised and kept once: Put reports it as already held and changes nothing.
//
// # Retry after pairing
//
// Items rejected only because their sender was not yet paired (CauseUnpaired) are indexed by
// sender key. Once the host pairs with that sender it calls Tx.Release(sender) inside the
// transaction that reprocesses them: Release removes the entries and returns them, and an item the
// host still refuses goes back with Put in the same transaction. Nothing is lost on a crash in
// between, because the removal and the reprocessing commit together.
//
// # Caveats
//
// The quarantine has no size limit and deletes nothing on its own: a relay's sender allowlist is
// what keeps strangers from filling it.
package quarantine
