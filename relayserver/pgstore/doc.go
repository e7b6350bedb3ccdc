// Package pgstore is the relay's PostgreSQL store: a relayserver.Store that any number of relay
// processes (replicas behind one URL) share, so a hosted relay survives losing a process or its
// machine.
//
// # Ordering invariant
//
// A pull never shows seq N+1 for a target while an item with seq N for that target can still
// commit. Otherwise a receiver acks past N and N is lost. The database enforces it: every writer
// of a target's queue first takes the target's transaction-scoped advisory lock, and allocates the
// seq, max(next_seq, accepted_at in ms), from the target's counter row read FOR UPDATE in the same
// transaction that commits the item. A second writer of the target waits until the first
// transaction has committed (and become visible) or rolled back, so seqs commit in order, and a
// pull, one statement with one snapshot, that sees N+1 also sees N. Seqs never repeat and never
// fall below the time floor.
//
// The same locks make the relay's checks hold across replicas: Tx.Admission takes the target's
// lock (and, for a target of a proven account, the account's) before it reads the dedup row,
// allowlist and quota counters, so a decision cannot be invalidated by another replica before
// the unit commits. Dedup, names, allowlists, rotation and expiry rest on the database's
// constraints and transactions, not on process memory.
//
// # Group commit
//
// Update hands a unit to one of Options.Writers writers; each opens a transaction with the first
// waiting unit, runs each further queued unit in a savepoint of its own, and commits once. A unit
// that fails is rolled back alone. Only a group's first unit waits for a queue lock; a later unit
// whose lock another transaction holds is rolled back to its savepoint and leads the writer's
// next group instead, so a group waits only while its first unit runs. Two groups can then
// deadlock only through their first units (items for several targets locked in opposite orders);
// PostgreSQL breaks it, and a unit that loses a deadlock or times out on a lock runs again in a
// later group, up to 8 times. A COMMIT whose connection broke is looked up by transaction id
// (txid_status) on another connection, so a committed group is never reported as failed; when
// even that fails, the units fail with ErrCommitUnknown. Open refuses a server with
// synchronous_commit or fsync off (ErrUnsafeSettings): the relay answers only what is durable.
//
// # Wakes across replicas
//
// The group's transaction sends NOTIFY agentmbx_items with the target key of every item it
// stored (rotations: both keys); PostgreSQL delivers it only on commit. Subscribe (the
// relayserver.Notifier the Server uses) listens on a connection of its own and passes each key
// on; after (re)connecting, and every Options.Recheck (5 s), it asks for a re-check of every
// parked pull, so a lost notification delays a wake but never loses an item.
//
// # Schema, epoch, restore
//
// Open creates the schema with a random epoch, or migrates an older one, in one transaction under
// an advisory lock; a newer schema is refused (relayserver.ErrSchemaTooNew). The epoch, relay key
// and heartbeat live in the meta table. RotateEpochIfStale (used by relayserver.Serve) checks the
// heartbeat and rotates in one transaction, so replicas starting together rotate once. Every
// subscribed (serving) process holds a shared advisory lock, and RotateEpoch refuses while any
// does (relayserver.ErrLocked): after a pg_restore or a point-in-time recovery, stop every
// replica, run agentmbx relay rotate-epoch --db, and start them again.
package pgstore
