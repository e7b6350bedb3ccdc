package relayserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// Scheduled backups (relay serve --backup-dir DIR --backup-every D --backup-keep N): the relay
// takes an online backup of its store every D into DIR, named relay-YYYYMMDDTHHMMSSZ.db, keeps the
// newest N and deletes older ones, and records the last attempt in DIR/last-backup.json. A failed
// backup is logged and retried (after a minute, doubling up to D); serving never stops for it.

// Backup schedule defaults and bounds.
const (
	DefaultBackupEvery = 24 * time.Hour
	DefaultBackupKeep  = 7
	// MinBackupEvery is the shortest interval a schedule takes.
	MinBackupEvery = time.Minute
	// backupRetry is the first wait after a failed backup.
	backupRetry = time.Minute
	// BackupStatusFile is the last attempt's record in the backup directory.
	BackupStatusFile = "last-backup.json"
	backupPrefix     = "relay-"
	backupSuffix     = ".db"
	backupTimeLayout = "20060102T150405Z"
)

// BackupSchedule configures the relay's scheduled backups.
type BackupSchedule struct {
	// Dir receives the backups (made 0700 when created).
	Dir string
	// Every is the interval between backups (default DefaultBackupEvery, at least MinBackupEvery).
	Every time.Duration
	// Keep is how many of the newest backups stay (default DefaultBackupKeep).
	Keep int
	// Take writes one online backup of the store to dest (sqlitestore.Backup in production).
	Take func(ctx context.Context, dest string) (Meta, error)
	// Clock is the time source (default time.Now).
	Clock func() time.Time
	// Logger receives a line for every backup and failure.
	Logger *slog.Logger
	// Metrics, when set, records each backup's outcome.
	Metrics *Metrics
}

// BackupStatus is BackupStatusFile's content: the last successful backup and the last failure.
type BackupStatus struct {
	LastSuccess string `json:"last_success,omitempty"` // ISO time
	LastFile    string `json:"last_file,omitempty"`
	LastEpoch   string `json:"last_epoch,omitempty"`
	LastFailure string `json:"last_failure,omitempty"` // ISO time
	LastError   string `json:"last_error,omitempty"`
	// Failures counts the failed attempts since the last success.
	Failures int `json:"failures"`
}

// Check validates the schedule's settings.
func (b *BackupSchedule) Check() error {
	switch {
	case b.Dir == "":
		return errors.New("no backup directory")
	case b.Every != 0 && b.Every < MinBackupEvery:
		return fmt.Errorf("backup interval %s is shorter than %s", b.Every, MinBackupEvery)
	case b.Keep < 0:
		return fmt.Errorf("backup keep %d is negative", b.Keep)
	case b.Take == nil:
		return errors.New("no backup function")
	}
	return nil
}

// RunBackups takes backups on the schedule until ctx ends. The first one is taken at once when
// the newest backup in Dir is older than Every (or there is none), else when it is Every old.
func RunBackups(ctx context.Context, b BackupSchedule) error {
	if err := b.Check(); err != nil {
		return fmt.Errorf("relayserver: backups: %w", err)
	}
	if b.Every == 0 {
		b.Every = DefaultBackupEvery
	}
	if b.Keep == 0 {
		b.Keep = DefaultBackupKeep
	}
	if b.Clock == nil {
		b.Clock = time.Now
	}
	if b.Logger == nil {
		b.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return fmt.Errorf("relayserver: backups: %w", err)
	}
	st := readBackupStatus(b.Dir)
	wait := time.Duration(0)
	if files, _ := listBackups(b.Dir); len(files) > 0 {
		if at, ok := backupTime(files[len(files)-1]); ok {
			wait = max(at.Add(b.Every).Sub(b.Clock()), 0)
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, st.LastSuccess); err == nil && b.Metrics != nil {
		b.Metrics.backupSucceeded(t) // from an earlier run of the relay
	}
	retry := backupRetry
	for {
		if wait > 0 {
			b.Logger.Debug("next scheduled backup", logkey.NextIn, wait.String())
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		if err := b.takeOne(ctx, &st); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait = min(retry, b.Every)
			retry = min(2*retry, b.Every)
			b.Logger.Warn("scheduled backup failed; retried", logkey.Err, err, logkey.NextIn, wait.String())
			continue
		}
		wait, retry = b.Every, backupRetry
	}
}

// takeOne takes one backup, prunes the old ones and records the attempt.
func (b *BackupSchedule) takeOne(ctx context.Context, st *BackupStatus) error {
	now := b.Clock().UTC()
	name := backupPrefix + now.Format(backupTimeLayout) + backupSuffix
	dest := filepath.Join(b.Dir, name)
	m, err := b.Take(ctx, dest)
	if err != nil {
		st.LastFailure, st.LastError = now.Format(time.RFC3339Nano), err.Error()
		st.Failures++
		writeBackupStatus(b.Dir, *st, b.Logger)
		if b.Metrics != nil {
			b.Metrics.backupResult(false)
		}
		return err
	}
	deleted := b.prune(name)
	st.LastSuccess, st.LastFile, st.LastEpoch, st.Failures = now.Format(time.RFC3339Nano), name, m.Epoch, 0
	writeBackupStatus(b.Dir, *st, b.Logger)
	if b.Metrics != nil {
		b.Metrics.backupResult(true)
		b.Metrics.backupSucceeded(now)
	}
	b.Logger.Info("scheduled backup taken", logkey.Backup, dest, logkey.Epoch, m.Epoch, logkey.Deleted, deleted)
	return nil
}

// prune deletes all but the newest Keep backups (never just, the one taken now).
func (b *BackupSchedule) prune(just string) int {
	files, err := listBackups(b.Dir)
	if err != nil {
		b.Logger.Warn("listing old backups failed", logkey.Dir, b.Dir, logkey.Err, err)
		return 0
	}
	n := 0
	for len(files) > b.Keep {
		old := files[0]
		files = files[1:]
		if old == just {
			continue
		}
		if err := os.Remove(filepath.Join(b.Dir, old)); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.Logger.Warn("deleting an old backup failed", logkey.Backup, old, logkey.Err, err)
			continue
		}
		n++
	}
	return n
}

// listBackups returns the names of the scheduled backups in dir, oldest first.
func listBackups(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if _, ok := backupTime(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out) // the time in the name sorts as the time
	return out, nil
}

// backupTime is the time in a scheduled backup's name.
func backupTime(name string) (time.Time, bool) {
	s, ok := strings.CutPrefix(name, backupPrefix)
	if !ok {
		return time.Time{}, false
	}
	if s, ok = strings.CutSuffix(s, backupSuffix); !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(backupTimeLayout, s)
	return t, err == nil
}

// ReadBackupStatus reads the last attempt's record in a backup directory (zero when none).
func ReadBackupStatus(dir string) (BackupStatus, []string, error) {
	files, err := listBackups(dir)
	return readBackupStatus(dir), files, err
}

func readBackupStatus(dir string) BackupStatus {
	var st BackupStatus
	if b, err := os.ReadFile(filepath.Join(dir, BackupStatusFile)); err == nil {
		_ = json.Unmarshal(b, &st) // a damaged record is rewritten by the next attempt
	}
	return st
}

func writeBackupStatus(dir string, st BackupStatus, log *slog.Logger) {
	if err := fsutil.WriteJSONFile(filepath.Join(dir, BackupStatusFile), st, 0o600); err != nil {
		log.Warn("recording the backup status failed", logkey.Dir, dir, logkey.Err, err)
	}
}
