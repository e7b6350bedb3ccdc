package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// FailBackupCopied fires in Backup once the copy is in its temporary file, before it is checked
// and renamed over the destination.
const FailBackupCopied = "sqlitestore.backup-copied"

// Backup writes a consistent copy of the store in dir to dest with VACUUM INTO, SQLite's online
// copy: it reads one snapshot inside a single read transaction, which under WAL never blocks the
// running relay's writer (only checkpoints wait for it to finish). It does not take the store's
// lock, so it is safe while a relay serves the store. The copy goes to a temporary file beside
// dest, created 0600 before the first byte, is checked to be a relay store, fsynced and renamed over dest, so dest is
// either the old file or a complete backup.
func Backup(ctx context.Context, dir, dest string) (relayserver.Meta, error) {
	var m relayserver.Meta
	src := filepath.Join(dir, DBFile)
	if _, err := os.Stat(src); err != nil {
		return m, fmt.Errorf("sqlitestore: backup %s: %w", src, err)
	}
	tmp, err := tempName(dest)
	if err != nil {
		return m, fmt.Errorf("sqlitestore: backup: %w", err)
	}
	defer removeDB(tmp) // only leftovers once renamed
	// VACUUM INTO would create the file with SQLite's default mode (0644 less the umask), and the
	// copy holds the store's secrets: create it empty and 0600 first (VACUUM INTO fills an empty
	// file, and SQLite gives its journal the database's mode).
	f, err := fsutil.CreateExclusive(tmp, 0o600)
	if err != nil {
		return m, fmt.Errorf("sqlitestore: backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return m, fmt.Errorf("sqlitestore: backup: %w", err)
	}
	db, err := sql.Open("sqlite", src+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return m, fmt.Errorf("sqlitestore: backup %s: %w", src, err)
	}
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, "VACUUM INTO ?", tmp)
	cerr := db.Close()
	if err = errors.Join(err, cerr); err != nil {
		return m, fmt.Errorf("sqlitestore: backup %s: %w", src, err)
	}
	_ = failpoint.Inject(FailBackupCopied)
	if m, err = inspect(ctx, tmp); err != nil {
		return m, fmt.Errorf("sqlitestore: backup %s: the copy: %w", src, err)
	}
	if err := syncFile(tmp); err != nil {
		return m, fmt.Errorf("sqlitestore: backup: %w", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return m, fmt.Errorf("sqlitestore: backup: %w", err)
	}
	syncDir(filepath.Dir(dest))
	return m, nil
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Force restores a backup bound to another relay key than the store directory's.
	Force bool
	// Rand is the source of the new epoch. Default crypto/rand.
	Rand io.Reader
	// Now is the restore's time, recorded as restored_at. Default time.Now.
	Now func() time.Time
}

// RestoreResult says what Restore did.
type RestoreResult struct {
	// Epoch is the restored store's new epoch.
	Epoch string
	// Previous is the epoch of the store that was replaced ("" when there was none).
	Previous string
	// Schema is the schema version of the backup (Open migrates an older one).
	Schema int
	// Kept names the replaced database, kept beside it (relay.db.pre-restore); "" when there
	// was none.
	Kept string
	// Warning says what could not be read of the replaced store ("" when all went well).
	Warning string
}

// Restore replaces the store in dir with the backup in src (docs/design.md: Epochs, restarts and
// restores). It takes the store's lock without waiting, so it fails with relayserver.ErrLocked
// while a relay serves dir. src must be a relay store of a schema this binary can open
// (relayserver.ErrBadBackup, relayserver.ErrSchemaTooNew) and, unless opts.Force, bound to the same
// relay key as dir's store and relay.key, when they have one (relayserver.ErrRelayKeyMismatch). The
// restored copy gets a new epoch, restored_at and restored_from (src's base name) in meta, and each
// target's next_seq raised to at least the replaced store's, so new items land above every seq
// handed out before. The copy is prepared in a temporary file and renamed over relay.db; the
// replaced database stays as relay.db.pre-restore, with its -wal and -shm files beside it (as
// relay.db.pre-restore-wal and -shm). On any error dir is unchanged.
func Restore(ctx context.Context, dir, src string, opts *RestoreOptions) (RestoreResult, error) {
	var o RestoreOptions
	if opts != nil {
		o = *opts
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var res RestoreResult
	fail := func(err error) (RestoreResult, error) {
		return RestoreResult{}, fmt.Errorf("sqlitestore: restore %s: %w", filepath.Base(src), err)
	}
	if _, err := os.Stat(src); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	lock, err := acquireLock(ctx, filepath.Join(dir, LockFile), 0)
	if err != nil {
		return fail(err)
	}
	defer releaseLock(lock)

	// The copy to restore: src is only read, never opened as a database in place.
	dbPath := filepath.Join(dir, DBFile)
	tmp, err := tempName(dbPath)
	if err != nil {
		return fail(err)
	}
	defer removeDB(tmp)
	if err := copyFile(src, tmp); err != nil {
		return fail(err)
	}
	bm, err := inspect(ctx, tmp)
	if err != nil {
		return fail(err)
	}
	res.Schema = bm.SchemaVersion

	// The store being replaced: its key, epoch and seqs. Closing it checkpoints its WAL into
	// relay.db, so no -wal file of the old database is left to meet the new one.
	var cur relayserver.Meta
	var seqs map[string]int64
	snaps, err := snapshotWAL(dbPath)
	defer dropSnapshots(snaps)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(dbPath); err == nil {
		// A damaged store is what a restore is for: what cannot be read of it is reported, not
		// fatal (the seq floor of now in ms still holds, and relay.key is still checked).
		cur, seqs, err = current(ctx, dbPath)
		if err != nil {
			res.Warning = err.Error()
			cur, seqs = relayserver.Meta{}, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	res.Previous = cur.Epoch
	if bm.RelayPubkey != "" && !o.Force {
		for _, have := range []string{cur.RelayPubkey, keyFilePubkey(dir)} {
			if have != "" && have != bm.RelayPubkey {
				return fail(fmt.Errorf("the backup belongs to relay key %s, this store to %s (--force restores it anyway): %w",
					storekit.ShortKey(bm.RelayPubkey), storekit.ShortKey(have), relayserver.ErrRelayKeyMismatch))
			}
		}
	}
	epoch, err := newEpoch(o.Rand)
	if err != nil {
		return fail(err)
	}
	if err := stamp(ctx, tmp, epoch, o.Now(), filepath.Base(src), seqs); err != nil {
		return fail(err)
	}
	if err := syncFile(tmp); err != nil {
		return fail(err)
	}
	// The replaced database is kept with its -wal and -shm files (a damaged store's committed
	// transactions may be only in its WAL), and no -wal of it is left to meet the new one.
	if _, err := os.Stat(dbPath); err == nil {
		res.Kept = dbPath + ".pre-restore"
		_ = os.Remove(res.Kept)
		if err := os.Link(dbPath, res.Kept); err != nil {
			return fail(fmt.Errorf("keep the replaced database: %w", err))
		}
	}
	if err := keepWAL(dbPath, res.Kept); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dbPath); err != nil {
		return fail(err)
	}
	syncDir(dir)
	res.Epoch = epoch
	return res, nil
}

// inspect opens the database file at path and checks it is a relay store this binary can open.
func inspect(ctx context.Context, path string) (relayserver.Meta, error) {
	var m relayserver.Meta
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return m, fmt.Errorf("%w: %w", relayserver.ErrBadBackup, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var ok string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&ok); err != nil || ok != "ok" {
		return m, fmt.Errorf("not a sound SQLite database (%v %s): %w", err, ok, relayserver.ErrBadBackup)
	}
	v, err := schemaVersion(ctx, db)
	if err != nil {
		return m, fmt.Errorf("%v: %w", err, relayserver.ErrBadBackup)
	}
	if v == 0 {
		return m, fmt.Errorf("no relay store in it: %w", relayserver.ErrBadBackup)
	}
	if v > SchemaVersion {
		return m, fmt.Errorf("schema version %d, this binary knows %d: %w", v, SchemaVersion,
			relayserver.ErrSchemaTooNew)
	}
	m.SchemaVersion = v
	if m.Epoch, err = getMeta(ctx, db, "epoch"); err != nil {
		return m, fmt.Errorf("no epoch: %w", relayserver.ErrBadBackup)
	}
	if m.RelayPubkey, err = getMeta(ctx, db, "relay_pubkey"); err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return m, fmt.Errorf("%v: %w", err, relayserver.ErrBadBackup)
	}
	return m, nil
}

// current reads the meta and per-target next_seq of the database being replaced and closes it.
func current(ctx context.Context, path string) (relayserver.Meta, map[string]int64, error) {
	var m relayserver.Meta
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return m, nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if m.Epoch, err = getMeta(ctx, db, "epoch"); err != nil {
		return m, nil, fmt.Errorf("the store being replaced: epoch: %w", err)
	}
	if m.RelayPubkey, err = getMeta(ctx, db, "relay_pubkey"); err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return m, nil, fmt.Errorf("the store being replaced: %w", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT target_pubkey, next_seq FROM seqs")
	if err != nil {
		return m, nil, fmt.Errorf("the store being replaced: %w", err)
	}
	defer rows.Close()
	seqs := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return m, nil, err
		}
		seqs[k] = n
	}
	if err := rows.Err(); err != nil {
		return m, nil, err
	}
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return m, nil, fmt.Errorf("the store being replaced: checkpoint: %w", err)
	}
	return m, seqs, nil
}

// stamp writes the new epoch, the restore record and the seq floors into the copy at path, in
// one transaction.
func stamp(ctx context.Context, path, epoch string, at time.Time, from string, seqs map[string]int64) error {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(FULL)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for k, v := range map[string]string{
		"epoch":         epoch,
		"restored_at":   strconv.FormatInt(at.UnixMilli(), 10),
		"restored_from": from,
	} {
		if err := setMeta(ctx, tx, k, v); err != nil {
			return fmt.Errorf("stamp: %w", err)
		}
	}
	for target, next := range seqs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO seqs(target_pubkey, next_seq) VALUES(?, ?)
ON CONFLICT(target_pubkey) DO UPDATE SET next_seq = max(next_seq, excluded.next_seq)`, target, next); err != nil {
			return fmt.Errorf("stamp: seq floor: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("stamp: %w", err)
	}
	// The copy must be one self-contained file before it is renamed into place.
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("stamp: checkpoint: %w", err)
	}
	return nil
}

// keyFilePubkey returns the public key of relay.key in dir, or "" when there is none or it is
// unreadable (LoadKey reports that when the relay starts).
func keyFilePubkey(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, relayserver.KeyFile))
	if err != nil {
		return ""
	}
	var kf mbx.KeyFile
	if json.Unmarshal(data, &kf) != nil || !mbx.ValidPublicKey(kf.PublicKey) {
		return ""
	}
	return kf.PublicKey
}

// removeDB removes a database file with its -wal and -shm files, if any.
func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix)
	}
}

// tempName returns an unused name beside path.
func tempName(path string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return path + ".tmp-" + hex.EncodeToString(b[:]), nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := fsutil.CreateExclusive(to, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// syncFile fsyncs path (created 0600 by CreateExclusive, never chmodded later).
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
