package sqlitestore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agentmbx/agentmbx/internal/logkey"
)

// The store's files are the relay's secrets and its users' mail: the directory is 0700, the
// database and its -wal and -shm files 0600.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

// dbSuffixes are the files SQLite keeps beside a database in WAL mode.
var dbSuffixes = []string{"-wal", "-shm"}

// prepareDir makes dir (0700), or tightens an existing one that group or others can reach,
// saying so in the log, and creates relay.db 0600 when it does not exist yet, so SQLite, which
// gives the -wal and -shm files the database's mode, never creates any of them wider.
func prepareDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, dirMode); err != nil {
			return fmt.Errorf("tighten %s to 0700: %w", dir, err)
		}
		log.Warn("store directory was open to group or others: tightened to 0700",
			logkey.Dir, dir, logkey.Was, fi.Mode().Perm().String())
	}
	f, err := os.OpenFile(filepath.Join(dir, DBFile), os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return err
	}
	return f.Close()
}

// tightenDBFiles makes the database at path and its -wal and -shm files 0600 where they exist
// (files of an older store, or made under a wide umask).
func tightenDBFiles(path string) error {
	for _, p := range append([]string{path}, path+dbSuffixes[0], path+dbSuffixes[1]) {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != fileMode {
			if err := os.Chmod(p, fileMode); err != nil {
				return err
			}
		}
	}
	return nil
}

// snapshotWAL copies the -wal and -shm files of the database at path, where they exist, to
// temporary names (path-wal.keep, path-shm.keep) before anything opens the database: SQLite
// drops a WAL it cannot use when it closes the database, and a damaged store's committed
// transactions may be only in it. It returns the copies made.
func snapshotWAL(path string) ([]string, error) {
	var made []string
	for _, suffix := range dbSuffixes {
		src, dst := path+suffix, path+suffix+".keep"
		_ = os.Remove(dst)
		if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := copyFile(src, dst); err != nil {
			return made, fmt.Errorf("keep %s: %w", filepath.Base(src), err)
		}
		made = append(made, dst)
	}
	return made, nil
}

// keepWAL puts the snapshots of snapshotWAL beside kept (kept-wal, kept-shm), where SQLite finds
// them when kept is opened, replacing any of an earlier restore, and removes what is left of the
// replaced database's own -wal and -shm so none meets the restored database.
func keepWAL(path, kept string) error {
	for _, suffix := range dbSuffixes {
		if kept != "" {
			_ = os.Remove(kept + suffix)
			err := os.Rename(path+suffix+".keep", kept+suffix)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("keep %s beside %s: %w", filepath.Base(path+suffix), filepath.Base(kept), err)
			}
		}
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// dropSnapshots removes the copies of snapshotWAL that keepWAL did not move.
func dropSnapshots(made []string) {
	for _, p := range made {
		_ = os.Remove(p)
	}
}
