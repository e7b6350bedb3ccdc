// Package sqlitestore is the relay's SQLite store: the relayserver.Store of a relay that runs as
// one process. docs/design.md (The SQLite store) explains its design.
//
// # Layout
//
// One directory holds DBFile (with its -wal and -shm files) and LockFile. relay.key, the relay's
// identity, lives beside them but belongs to the relay, not to the store. The database runs in
// WAL mode with synchronous=FULL, so a committed transaction survives a crash of the process or of
// the machine.
//
// # Writes
//
// A process holds LockFile for as long as the store is open; a second one waits
// Options.LockWait and then fails with relayserver.ErrLocked naming the holder's pid. Update hands
// a unit to the store's one writer, which group-commits the units of concurrent callers: each
// caller returns only after the commit that holds its unit, a unit that fails is rolled back
// alone, and a commit that fails fails every unit in it with relayserver.ErrCommit. A commit is
// one fsync of the WAL however many units it carries; Stats counts commits and units. Reads use
// other connections and see committed state only.
//
// # Schema
//
// Open creates a store with a random epoch, migrates an older schema (SchemaVersion) in one
// transaction that keeps the epoch, and refuses a newer one with relayserver.ErrSchemaTooNew.
//
// # Backup and restore
//
// Backup copies the store online beside a serving relay. Restore (which fails with
// relayserver.ErrLocked while a relay serves) checks a backup, gives it a new epoch and seq
// floors above everything the replaced store handed out, and puts it in place, keeping the old
// database beside it. Seqs are max(next_seq, accepted_at in ms): large and not dense, and never
// repeated for a target, even after a restore from an older copy once the clock has moved on.
//
// FailBeforeCommit and FailAfterCommit (package failpoint) let crash tests kill the process on
// either side of a commit.
package sqlitestore
