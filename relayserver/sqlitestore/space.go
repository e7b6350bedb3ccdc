package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/relayserver"
)

// BallastFile is the store's reserve of disk space: released when a write finds the disk full,
// so that acks and the retention sweep, whose deletes need WAL space, still run.
const BallastFile = "relay.ballast"

// DefaultBallast is the size of the ballast file.
const DefaultBallast = 16 << 20

// Totals implements relayserver.Store.
func (s *Store) Totals(ctx context.Context) (relayserver.Counts, error) {
	var c relayserver.Counts
	err := s.db.QueryRowContext(ctx,
		"SELECT COALESCE(SUM(items), 0), COALESCE(SUM(bytes), 0) FROM usage WHERE sender_pubkey = ''").Scan(&c.Items, &c.Bytes)
	if err != nil {
		return c, fmt.Errorf("sqlitestore: totals: %w", err)
	}
	return c, nil
}

// space keeps the ballast and the store's low-space state.
type space struct {
	path string // the ballast file; "" when the store keeps none
	size int64
	free func(dir string) (int64, bool)

	mu      sync.Mutex
	low     bool
	logged  bool // the current low episode was logged
	checked time.Time
}

// isFull reports whether err is SQLite's "database or disk is full".
func isFull(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}

// ensure creates the ballast when it is missing or short. A disk too full to hold it leaves the
// store low on space.
func (sp *space) ensure() error {
	if sp.path == "" {
		return nil
	}
	if fi, err := os.Stat(sp.path); err == nil && fi.Size() >= sp.size {
		return nil
	}
	return fsutil.Reserve(sp.path, sp.size)
}

// hitFull records a write that found the disk full: the ballast goes, and pushes stop until
// space returns. It reports whether this was news (the store was not low before).
func (sp *space) hitFull() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.path != "" {
		_ = os.Remove(sp.path) // gone already, or it cannot go: the store is low either way
	}
	news := !sp.low
	if news {
		sp.logged = false
	}
	sp.low, sp.checked = true, time.Now()
	return news
}

// freshlyFull reports, once per episode, that the store went low and nobody logged it yet.
func (sp *space) freshlyFull() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.low || sp.logged {
		return false
	}
	sp.logged = true
	return true
}

// isLow reports the low-space state, looking at the disk at most once a second while low: once
// twice the ballast is free, the ballast is made again and the state clears.
func (sp *space) isLow() (low, cleared bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.low || time.Since(sp.checked) < time.Second {
		return sp.low, false
	}
	sp.checked = time.Now()
	free, ok := sp.free(filepath.Dir(sp.path))
	if !ok || free < 2*sp.size {
		return true, false
	}
	if err := sp.ensure(); err != nil {
		return true, false
	}
	sp.low = false
	return false, true
}

// SpaceLow implements relayserver.SpaceReporter.
func (s *Store) SpaceLow() bool {
	low, cleared := s.space.isLow()
	if cleared {
		s.log.Info("disk space is back: ballast made again, pushes accepted", logkey.Dir, s.dir)
	}
	return low
}

// noteFull is called with the error of every failed update: a full disk releases the ballast
// and marks the error with relayserver.ErrStoreFull.
func (s *Store) noteFull(err error) error {
	if err == nil || !isFull(err) {
		return err
	}
	s.space.hitFull()
	if s.space.freshlyFull() {
		s.log.Error("store disk is full: ballast released so acks and the sweep can free space; pushes refused until space returns",
			logkey.Dir, s.dir, logkey.Ballast, s.space.size)
	}
	return fmt.Errorf("%w: %w", relayserver.ErrStoreFull, err)
}
