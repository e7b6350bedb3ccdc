// Package sqlitestore is the relay's SQLite store: the relayserver.Store the relay core keeps all
// of its state in (docs/design.md: The relay store).
//
// # Layout
//
// One directory holds relay.db (with its -wal and -shm files) and relay.lock. relay.key, the
// relay's identity, lives beside them but belongs to the relay, not to the store. The database
// runs in WAL mode with synchronous=FULL, so a committed transaction survives a crash of the
// process or of the machine.
//
// # One writer
//
// A process holds relay.lock (flock) for as long as the store is open; a second process waits
// Options.LockWait and then fails with relayserver.ErrLocked naming the holder's pid. Inside the
// process one goroutine owns the write connection. Update hands it a unit; the writer opens a
// transaction with the first waiting unit, runs each further unit that is already queued in a
// savepoint of its own, and commits once (group commit). Each caller returns only after the
// commit that holds its unit: a unit that fails is rolled back alone, a commit that fails fails
// every unit in it with relayserver.ErrCommit. Reads use other connections and see committed
// state only.
//
// # Cost of a write
//
// A commit is one fsync of the WAL (plus the database file's when a checkpoint runs), however
// many units it carries; Stats counts commits and units. Statements are prepared once, on the
// writer's connection and on the read pool. Savepoint journals stay in memory (temp_store =
// MEMORY): they only serve rollbacks inside the open transaction, never crash recovery, which the
// WAL alone provides. A writer unit runs without a savepoint of its own unless one of its group
// failed after writing (the group is then rolled back and re-run with a savepoint per unit).
// Admitting and inserting one item for one target takes two statements: Tx.Admission reads the
// dedup row, the target's enrolment, its allowlist and the quota counters at once, and
// InsertItem inserts the item with its seq computed in the statement; the items_queued trigger
// writes its dedup row (a repeat fails the statement before anything changed), the seq counter
// and both usage counters.
//
// # Expiry
//
// The retention sweep's primitives (relayserver.Expiry) use two indexes: items_expires finds the
// expired items (ExpiredItems, oldest first, bounded), and dedup_accepted the dedup rows old
// enough to prune (PruneDedup, bounded, skipping any row whose item is still queued).
// DeleteItem keeps the item's dedup row as a tombstone and takes the item off the usage counters
// in the same unit.
//
// # Schema
//
// Tables: meta (epoch, relay_pubkey, schema_version, heartbeat), enrolments, sender_lists with
// sender_list_members, enc_ads, items, dedup, seqs, acked, usage (queue counters that make
// quota checks O(1)), and keys. Items and dedup rows, the tables that grow with traffic, name
// host keys by keys.id (a small integer, cached on both sides since a key row never changes) and
// keep wire hashes as 32 raw bytes; items live in their primary key's b-tree (WITHOUT ROWID). Open creates a new store with a random epoch, migrates an older schema in
// one transaction that keeps the epoch, and refuses a newer one with
// relayserver.ErrSchemaTooNew.
//
// # Backup and restore
//
// Backup copies relay.db online with VACUUM INTO (one read snapshot, no store lock, safe beside
// a serving relay) to a temporary file it checks, makes 0600, fsyncs and renames. Restore holds
// the lock (failing at once with relayserver.ErrLocked while a relay serves), checks the backup in
// a private copy (quick_check, schema, relay key), stamps a new epoch, restored_at, restored_from
// and the replaced store's seq floors into the copy, and renames it over relay.db after the old
// database is checkpointed and hard-linked to relay.db.pre-restore.
//
// # Caveats
//
// Sequence numbers are max(next_seq, accepted_at in ms), so they are large (about 1.7e12) and
// not dense; they never repeat for a target, even after a restore from an older copy as long as
// the clock has moved on. The failpoints relay.before-commit and relay.after-commit (package
// failpoint) let crash tests kill the process at either side of a commit.
package sqlitestore
