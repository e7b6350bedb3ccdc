package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// File names inside the store directory.
const (
	DBFile   = "relay.db"
	LockFile = "relay.lock"
)

// Options tune a store. The zero value (or nil) is right for production.
type Options struct {
	// LockWait is how long Open waits for another process to release the store before it
	// fails with ErrLocked. Default 5 s.
	LockWait time.Duration
	// MaxGroup caps how many concurrent units one commit carries. 1 commits every unit on its
	// own (the benchmark's baseline). Default 512.
	MaxGroup int
	// MaxGroupItems closes a group to further units once its units have queued this many items
	// (the unit that crosses it still runs whole). Default DefaultMaxGroupItems.
	MaxGroupItems int
	// Rand is the source of new epochs. Default crypto/rand.
	Rand io.Reader
	// Logger receives state changes (migrations, epoch rotation). Default: discard.
	Logger *slog.Logger
	// Readers is the number of read connections. Default 4.
	Readers int
	// Ballast is the size of the reserve file (relay.ballast) released when a write finds the
	// disk full, so that deletes still have room. Default DefaultBallast; negative keeps none.
	Ballast int64
	// MaxPages caps the database's size in pages (PRAGMA max_page_count); a write past it fails
	// as on a full disk. 0: no cap.
	MaxPages int64
	// FreeSpace reports the free bytes of the disk holding a directory (injected for tests).
	// Default fsutil.FreeSpace.
	FreeSpace func(dir string) (int64, bool)
}

// withDefaults is a copy of o (nil: the zero value) with every unset field at its default.
func (o *Options) withDefaults() Options {
	var d Options
	if o != nil {
		d = *o
	}
	if d.LockWait <= 0 {
		d.LockWait = 5 * time.Second
	}
	if d.MaxGroup <= 0 {
		d.MaxGroup = 512
	}
	if d.MaxGroupItems <= 0 {
		d.MaxGroupItems = DefaultMaxGroupItems
	}
	if d.Rand == nil {
		d.Rand = rand.Reader
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Readers <= 0 {
		d.Readers = 4
	}
	if d.Ballast == 0 {
		d.Ballast = DefaultBallast
	}
	if d.FreeSpace == nil {
		d.FreeSpace = fsutil.FreeSpace
	}
	return d
}

// Store is the SQLite implementation of relayserver.Store: one database file in WAL mode with
// synchronous=FULL, one writer goroutine that group-commits the units of concurrent callers, and
// a pool of read connections that see only committed state.
type Store struct {
	dir    string
	db     *sql.DB
	rq     *readStmts
	rk     *readKeys
	ec     *enrolCache
	lock   *os.File
	log    *slog.Logger
	rand   io.Reader
	w      *writer
	space  *space
	closeM sync.Mutex
	closed bool
}

var (
	_ relayserver.Store          = (*Store)(nil)
	_ relayserver.QueueStatter   = (*Store)(nil)
	_ relayserver.CommitReporter = (*Store)(nil)
)

// Open opens (creating it when needed) the store in dir. It takes the directory's lock file
// first: while another process holds it, Open retries for Options.LockWait and then fails with an
// error wrapping relayserver.ErrLocked. A store whose schema is newer than SchemaVersion is
// refused with relayserver.ErrSchemaTooNew; an older one is migrated in one transaction that
// keeps its epoch.
func Open(ctx context.Context, dir string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	if err := prepareDir(dir, o.Logger); err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", dir, err)
	}
	lock, err := acquireLock(ctx, filepath.Join(dir, LockFile), o.LockWait)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", dir, err)
	}
	s := &Store{dir: dir, lock: lock, log: o.Logger, rand: o.Rand,
		space: &space{size: max(o.Ballast, 0), free: o.FreeSpace}}
	if o.Ballast > 0 {
		s.space.path = filepath.Join(dir, BallastFile)
		if err := s.space.ensure(); err != nil {
			s.space.hitFull()
			s.log.Error("no room for the store's ballast: pushes refused until space returns",
				logkey.Dir, dir, logkey.Err, err)
		}
	}
	ok := false
	defer func() {
		if !ok {
			if s.db != nil {
				s.db.Close()
			}
			releaseLock(lock)
		}
	}()
	dsn := filepath.Join(dir, DBFile) +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)" +
		"&_pragma=foreign_keys(0)&_pragma=temp_store(MEMORY)"
	if o.MaxPages > 0 {
		// SQLite refuses to grow the database past it with SQLITE_FULL, as on a full disk.
		dsn += fmt.Sprintf("&_pragma=max_page_count(%d)", o.MaxPages)
	}
	s.db, err = sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", dir, err)
	}
	s.rq = &readStmts{db: s.db, m: map[string]*sql.Stmt{}}
	s.rk = newReadKeys()
	s.ec = newEnrolCache()
	s.db.SetMaxOpenConns(o.Readers + 1)
	s.db.SetMaxIdleConns(o.Readers + 1)
	s.db.SetConnMaxIdleTime(0)
	s.db.SetConnMaxLifetime(0)

	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", dir, err)
	}
	if err := s.migrate(ctx, conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", dir, err)
	}
	if err := tightenDBFiles(filepath.Join(dir, DBFile)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", dir, err)
	}
	s.w = newWriter(conn, o.MaxGroup, o.MaxGroupItems, s.ec)
	go s.w.run()
	ok = true
	return s, nil
}

// Dir returns the store directory.
func (s *Store) Dir() string { return s.dir }

// Close finishes the commit in progress, fails updates still queued with ErrClosed, and
// releases the database and the lock. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeM.Lock()
	defer s.closeM.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.w.stop()
	s.rq.close()
	err := s.db.Close()
	s.rq.preps.Wait() // a background prepare that was opening a connection has let it go
	releaseLock(s.lock)
	if err != nil {
		return fmt.Errorf("sqlitestore: close: %w", err)
	}
	return nil
}

// Stats counts the store's write transactions since Open.
type Stats struct {
	// Commits is the number of write transactions committed; each is one fsync of the WAL
	// (synchronous=FULL), plus one of the database file when a checkpoint runs.
	Commits int64
	// Units is the number of Update units those transactions carried (Units/Commits is the
	// mean size of a group commit).
	Units int64
}

// Stats returns the store's write counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.w.Commits.Load(), Units: s.w.Units.Load()}
}

// Update implements relayserver.Store.
func (s *Store) Update(ctx context.Context, fn func(relayserver.Tx) error) error {
	return s.noteFull(s.w.submit(ctx, fn))
}

// migrate creates or upgrades the schema in one immediate transaction.
func (s *Store) migrate(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	have, err := schemaVersion(ctx, conn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("schema version %d, this binary knows %d: %w", have, SchemaVersion,
			relayserver.ErrSchemaTooNew)
	}
	if have == SchemaVersion {
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		done = true
		return nil
	}
	if err := applyMigrations(ctx, conn, have, SchemaVersion); err != nil {
		return err
	}
	if have == 0 {
		epoch, err := newEpoch(s.rand)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if err := setMeta(ctx, conn, "epoch", epoch); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if err := setMeta(ctx, conn, "relay_pubkey", ""); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	done = true
	if have == 0 {
		s.log.Info("relay store created", logkey.Dir, s.dir, logkey.Schema, SchemaVersion)
	} else {
		s.log.Info("relay store migrated",
			logkey.Dir, s.dir, logkey.FromSchema, have, logkey.Schema, SchemaVersion)
	}
	return nil
}

// applyMigrations runs migrations from → to inside the caller's transaction and records the
// version reached.
func applyMigrations(ctx context.Context, conn *sql.Conn, from, to int) error {
	for v := from; v < to; v++ {
		if _, err := conn.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate %d→%d: %w", v, v+1, err)
		}
	}
	if err := setMeta(ctx, conn, "schema_version", strconv.Itoa(to)); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// schemaVersion reads the version of an open database; 0 for an empty one.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	var n int
	err := q.QueryRowContext(ctx,
		"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'").Scan(&n)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	return storekit.SchemaVersion(getMeta(ctx, q, "schema_version"))
}

// querier is what *sql.DB, *sql.Conn and the writer's statement cache have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getMeta(ctx context.Context, q querier, key string) (string, error) {
	var v string
	err := q.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = ?", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", relayserver.ErrNotFound
	}
	return v, err
}

func setMeta(ctx context.Context, q querier, key, value string) error {
	_, err := q.ExecContext(ctx,
		"INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
		key, value)
	return err
}

// newEpoch returns a random UUID v4 string, the epoch format of 0.5.x.
func newEpoch(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("new epoch: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// Meta implements relayserver.Store.
func (s *Store) Meta(ctx context.Context) (relayserver.Meta, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT key, value FROM meta")
	if err != nil {
		return relayserver.Meta{}, fmt.Errorf("sqlitestore: meta: %w", err)
	}
	defer rows.Close()
	m, err := storekit.ScanMeta(rows)
	if err != nil {
		return m, fmt.Errorf("sqlitestore: meta: %w", err)
	}
	return m, nil
}

// BindRelayKey implements relayserver.Store.
func (s *Store) BindRelayKey(ctx context.Context, pubkey string) error {
	err := s.Update(ctx, func(relayserver.Tx) error {
		have, err := getMeta(ctx, s.w.q, "relay_pubkey")
		if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
			return err
		}
		if have == "" {
			return setMeta(ctx, s.w.q, "relay_pubkey", pubkey)
		}
		if have != pubkey {
			return storekit.KeyMismatch("store", have, pubkey)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: bind relay key: %w", err)
	}
	return nil
}

// RotateEpoch implements relayserver.Store.
func (s *Store) RotateEpoch(ctx context.Context) (string, error) {
	epoch, err := newEpoch(s.rand)
	if err != nil {
		return "", fmt.Errorf("sqlitestore: rotate epoch: %w", err)
	}
	err = s.Update(ctx, func(relayserver.Tx) error { return setMeta(ctx, s.w.q, "epoch", epoch) })
	if err != nil {
		return "", fmt.Errorf("sqlitestore: rotate epoch: %w", err)
	}
	s.log.Info("relay epoch rotated", logkey.Dir, s.dir, logkey.Epoch, epoch)
	return epoch, nil
}

// Heartbeat implements relayserver.Store.
func (s *Store) Heartbeat(ctx context.Context, now time.Time) error {
	err := s.Update(ctx, func(relayserver.Tx) error {
		return setMeta(ctx, s.w.q, "heartbeat", strconv.FormatInt(now.UnixMilli(), 10))
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: heartbeat: %w", err)
	}
	return nil
}
