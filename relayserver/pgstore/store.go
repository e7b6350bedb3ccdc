package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// Advisory lock keys (pg_advisory_*): one namespace for this package.
const (
	lockMigrate int64 = 0x6d62785f6d696772 // "mbx_migr": one migration at a time
	lockServing int64 = 0x6d62785f73727665 // "mbx_srve": held shared by every serving replica
)

// Failpoints of the writers (see package failpoint), named as in sqlitestore.
const (
	FailBeforeCommit = storekit.FailBeforeCommit // every unit of a group ran, before COMMIT
	FailAfterCommit  = storekit.FailAfterCommit  // COMMIT returned, no caller told yet
)

// ErrUnsafeSettings is returned by Open when the server would acknowledge a commit before it is
// durable (synchronous_commit = off, or fsync = off).
var ErrUnsafeSettings = errors.New("database settings lose acknowledged commits on a crash")

// Options tune a store. The zero value (or nil) is right for production.
type Options struct {
	// MaxGroup caps how many concurrent units one commit carries. 1 commits every unit on its
	// own (the benchmark's baseline). Default 512.
	MaxGroup int
	// Writers is the number of group-committing writers of this process, each on its own
	// connection. Default 2.
	Writers int
	// MaxConns caps the connection pool (writers, reads). Default 16.
	MaxConns int32
	// Recheck is how often a subscriber is told to re-check every parked pull, so a lost
	// notification delays a wake by at most this much. Default 1 min: notifications are not
	// lost while the listening session lives (every reconnect re-checks at once), and each
	// re-check costs every parked pull a read, 10,000 reads at 10,000 parked.
	Recheck time.Duration
	// LockTimeout bounds how long a statement waits for a row or advisory lock held by another
	// transaction (a stuck replica); the unit is then retried in a later transaction. Default 30 s.
	LockTimeout time.Duration
	// Logger receives state changes (migrations, epoch rotation, listener reconnects). Default:
	// discard.
	Logger *slog.Logger
}

// withDefaults is a copy of o (nil: the zero value) with every unset field at its default.
func (o *Options) withDefaults() Options {
	var d Options
	if o != nil {
		d = *o
	}
	if d.MaxGroup <= 0 {
		d.MaxGroup = 512
	}
	if d.Writers <= 0 {
		d.Writers = 2
	}
	if d.MaxConns <= 0 {
		d.MaxConns = 16
	}
	if d.Recheck <= 0 {
		d.Recheck = time.Minute
	}
	if d.LockTimeout <= 0 {
		d.LockTimeout = 30 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

// Store is the PostgreSQL implementation of relayserver.Store. Any number of processes may open
// the same database at once.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	opt  Options
	w    *writer
	lis  *listener

	closeM sync.Mutex
	closed bool
}

var _ relayserver.Store = (*Store)(nil)

// Open connects to the database at dbURL (a postgres:// URL or a key=value DSN), refuses settings
// that could lose an acknowledged commit (ErrUnsafeSettings), and creates or migrates the schema
// in one transaction: a database whose schema is newer than SchemaVersion is refused with
// relayserver.ErrSchemaTooNew. Errors never carry the URL's password.
func Open(ctx context.Context, dbURL string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		// pgx's parse errors may quote the URL; say only what kind of thing is wrong.
		return nil, fmt.Errorf("pgstore: open: the database URL does not parse (%s)", relayserver.DBLabel(dbURL))
	}
	cfg.MaxConns = max(o.MaxConns, int32(o.Writers)+2)
	cfg.ConnConfig.RuntimeParams["application_name"] = "agentmbx-relay"
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(o.LockTimeout.Milliseconds(), 10)
	// A replica that dies inside a transaction must not hold the target's counter row for long.
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s := &Store{pool: pool, log: o.Logger, opt: o}
	if err := s.checkSettings(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s.w = newWriter(pool, o)
	s.lis = newListener(pool.Config().ConnConfig, o)
	return s, nil
}

// checkSettings refuses a server that acknowledges commits before they are durable.
func (s *Store) checkSettings(ctx context.Context) error {
	var sc, fsync string
	err := s.pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('fsync')").
		Scan(&sc, &fsync)
	if err != nil {
		return err
	}
	if sc == "off" || fsync == "off" {
		return fmt.Errorf("synchronous_commit = %s, fsync = %s (both must be on): %w", sc, fsync, ErrUnsafeSettings)
	}
	return nil
}

// Close finishes the commits in progress, fails updates still queued with ErrClosed, stops the
// listener and closes the pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeM.Lock()
	defer s.closeM.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.w.stop()
	s.lis.stop()
	s.pool.Close()
	return nil
}

// Update implements relayserver.Store.
func (s *Store) Update(ctx context.Context, fn func(relayserver.Tx) error) error {
	return s.w.submit(ctx, fn)
}

// Stats counts the store's write transactions since Open.
type Stats struct {
	// Commits is the number of group transactions committed.
	Commits int64
	// Units is the number of Update units those transactions carried.
	Units int64
	// Retries is the number of units re-run in a later transaction after a deadlock or a lock
	// timeout.
	Retries int64
}

// Stats returns the store's write counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.w.Commits.Load(), Units: s.w.Units.Load(), Retries: s.w.retries.Load()}
}

// migrate creates or upgrades the schema in one transaction, under an advisory lock so replicas
// starting together migrate once.
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockMigrate); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		have, err := schemaVersion(ctx, tx)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if have > SchemaVersion {
			return fmt.Errorf("schema version %d, this binary knows %d: %w", have, SchemaVersion,
				relayserver.ErrSchemaTooNew)
		}
		if have == SchemaVersion {
			return nil
		}
		for v := have; v < SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate %d→%d: %w", v, v+1, err)
			}
		}
		if have == 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO meta(key, value) VALUES
	('epoch', gen_random_uuid()::text), ('relay_pubkey', '')`); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
		}
		if err := setMeta(ctx, tx, "schema_version", strconv.Itoa(SchemaVersion)); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if have == 0 {
			s.log.Info("relay database created", logkey.Schema, SchemaVersion)
		} else {
			s.log.Info("relay database migrated", logkey.FromSchema, have, logkey.Schema, SchemaVersion)
		}
		return nil
	})
}

// querier is what a pool, a connection and a transaction have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion reads the version of the database; 0 for one without the relay's tables.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass('meta') IS NOT NULL").Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	return storekit.SchemaVersion(getMeta(ctx, q, "schema_version"))
}

func getMeta(ctx context.Context, q querier, key string) (string, error) {
	var v string
	err := q.QueryRow(ctx, "SELECT value FROM meta WHERE key = $1", key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", relayserver.ErrNotFound
	}
	return v, err
}

func setMeta(ctx context.Context, q querier, key, value string) error {
	_, err := q.Exec(ctx, `INSERT INTO meta(key, value) VALUES($1, $2)
ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// Meta implements relayserver.Store.
func (s *Store) Meta(ctx context.Context) (relayserver.Meta, error) {
	rows, err := s.pool.Query(ctx, "SELECT key, value FROM meta")
	if err != nil {
		return relayserver.Meta{}, fmt.Errorf("pgstore: meta: %w", err)
	}
	defer rows.Close()
	m, err := storekit.ScanMeta(rows)
	if err != nil {
		return m, fmt.Errorf("pgstore: meta: %w", err)
	}
	return m, nil
}

// BindRelayKey implements relayserver.Store.
func (s *Store) BindRelayKey(ctx context.Context, pubkey string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var have string
		err := tx.QueryRow(ctx, "SELECT value FROM meta WHERE key = 'relay_pubkey' FOR UPDATE").Scan(&have)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if have == "" {
			return setMeta(ctx, tx, "relay_pubkey", pubkey)
		}
		if have != pubkey {
			return storekit.KeyMismatch("database", have, pubkey)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: bind relay key: %w", err)
	}
	return nil
}

// RotateEpoch implements relayserver.Store. It refuses (relayserver.ErrLocked) while any relay
// process serves the database, since each of them keeps answering with the epoch it read at
// start: stop every replica, rotate, start them again.
func (s *Store) RotateEpoch(ctx context.Context) (string, error) {
	var epoch string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var free bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", lockServing).Scan(&free); err != nil {
			return err
		}
		if !free {
			return fmt.Errorf("a relay process serves this database: %w", relayserver.ErrLocked)
		}
		return tx.QueryRow(ctx, `UPDATE meta SET value = gen_random_uuid()::text WHERE key = 'epoch'
RETURNING value`).Scan(&epoch)
	})
	if err != nil {
		return "", fmt.Errorf("pgstore: rotate epoch: %w", err)
	}
	s.log.Info("relay epoch rotated", logkey.Epoch, epoch)
	return epoch, nil
}

// RotateEpochIfStale writes now as the heartbeat and, when the stored heartbeat was older than
// stale, gives the database a new epoch, in one transaction that holds the meta rows: of several
// replicas starting together after an outage, only the first rotates. relayserver.Serve uses it
// instead of its separate Meta, RotateEpoch and Heartbeat calls.
func (s *Store) RotateEpochIfStale(ctx context.Context, now time.Time, stale time.Duration) (epoch string, rotated bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The lock first, then the read: in its own statement the read sees what a replica that
		// held the lock before committed.
		if _, err := tx.Exec(ctx, "SELECT 1 FROM meta WHERE key = 'epoch' FOR UPDATE"); err != nil {
			return err
		}
		hb, err := getMeta(ctx, tx, "heartbeat")
		if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
			return err
		}
		if ms, err := strconv.ParseInt(hb, 10, 64); err == nil && now.Sub(time.UnixMilli(ms)) > stale {
			rotated = true
			if _, err := tx.Exec(ctx, "UPDATE meta SET value = gen_random_uuid()::text WHERE key = 'epoch'"); err != nil {
				return err
			}
		}
		if err := setMeta(ctx, tx, "heartbeat", strconv.FormatInt(now.UnixMilli(), 10)); err != nil {
			return err
		}
		epoch, err = getMeta(ctx, tx, "epoch")
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("pgstore: epoch check: %w", err)
	}
	if rotated {
		s.log.Info("relay epoch rotated", logkey.Epoch, epoch)
	}
	return epoch, rotated, nil
}

// Heartbeat implements relayserver.Store.
func (s *Store) Heartbeat(ctx context.Context, now time.Time) error {
	if err := setMeta(ctx, s.pool, "heartbeat", strconv.FormatInt(now.UnixMilli(), 10)); err != nil {
		return fmt.Errorf("pgstore: heartbeat: %w", err)
	}
	return nil
}
