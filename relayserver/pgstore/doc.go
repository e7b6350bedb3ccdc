// Package pgstore is the relay's PostgreSQL store: a relayserver.Store that any number of relay
// processes (replicas behind one URL) share, so a hosted relay survives losing a process or its
// machine. docs/design.md (The PostgreSQL store) explains its design.
//
// # Ordering
//
// A pull never shows seq N+1 for a target while an item with seq N for that target can still
// commit, or a receiver would ack past N and lose it. Every writer of a target's queue holds the
// target's transaction-scoped advisory lock and allocates the seq from the target's counter row
// in the transaction that commits the item, so seqs commit in order. The same locks make
// admission decisions (dedup, allowlist, quotas) hold across replicas until the unit commits.
//
// # Writes
//
// Update hands a unit to one of Options.Writers writers, which group-commit: a unit that fails is
// rolled back alone, a unit that loses a deadlock or a lock timeout runs again in a later group
// (Stats.Retries), and a COMMIT whose connection broke is looked up by transaction id, so a
// committed group is never reported as failed; when even that fails, its units fail with
// ErrCommitUnknown. Open refuses a server that acknowledges commits before they are durable
// (ErrUnsafeSettings).
//
// # Wakes across replicas
//
// Commits notify the keys of the targets they stored; Subscribe (the relayserver.Notifier the
// Server uses) passes them on and asks for a re-check of every held pull after a reconnect and
// every Options.Recheck, so a lost notification delays a wake but never loses an item.
//
// # Schema and epoch
//
// Open creates or migrates the schema in one transaction under an advisory lock and refuses a
// newer one (relayserver.ErrSchemaTooNew). RotateEpochIfStale checks the heartbeat and rotates in
// one transaction, so replicas starting together rotate once. RotateEpoch refuses while any
// process serves the database (relayserver.ErrLocked): after a pg_restore or a point-in-time
// recovery, stop every replica, run agentmbx relay rotate-epoch --db, and start them again.
package pgstore
