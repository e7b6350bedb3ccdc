package host

import (
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
)

// stateDBOptions are the bbolt options of every open of the host's store (init, open, rotation).
// What the host relies on: every commit is fsynced before Update returns (NoSync false; a
// delivery receipt and an accept are only sent after their rows are on disk), the file's growth
// is fsynced too (NoGrowSync false), the file is opened for writing, and a second process waits
// at most timeout for the lock, then fails (bbolt.ErrTimeout, reported as api.ErrLocked) instead
// of waiting for ever. noSync is true only for benchmarks and tests that measure nothing but speed
// (Options.NoSync).
func stateDBOptions(timeout time.Duration, noSync bool) *bbolt.Options {
	return &bbolt.Options{Timeout: timeout, NoSync: noSync, NoGrowSync: false, ReadOnly: false}
}

// openStateDB opens the store in the home dir, 0600.
func openStateDB(dir string, timeout time.Duration, noSync bool) (*bbolt.DB, error) {
	return bbolt.Open(filepath.Join(dir, StateFile), 0o600, stateDBOptions(timeout, noSync))
}
