// Package fsutil holds the file-system helpers that more than one package needs.
package fsutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteJSONFile replaces path with v as JSON and a newline, with WriteFileAtomic.
func WriteJSONFile(path string, v any, perm os.FileMode) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(b, '\n'), perm)
}

// WriteFileAtomic replaces path with data so that a reader, and the file system after a crash,
// sees either the old content or the whole new one: it writes a temporary file beside path with
// mode perm, fsyncs it, renames it over path and fsyncs the directory, so the rename itself is
// durable when WriteFileAtomic returns. On failure the temporary file is removed and path is
// left as it was.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("write %s: %w", base, err)
		}
	}()
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := writeSynced(f, data, perm); err != nil {
		_ = os.Remove(tmp) // the write's error is the one to report
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp) // the rename's error is the one to report
		return err
	}
	return SyncDir(dir)
}

// writeSynced sets f's mode, writes data, fsyncs and closes f.
func writeSynced(f *os.File, data []byte, perm os.FileMode) error {
	werr := f.Chmod(perm)
	if werr == nil {
		_, werr = f.Write(data)
	}
	if werr == nil {
		werr = f.Sync()
	}
	return errors.Join(werr, f.Close())
}

// SyncDir fsyncs a directory, making the creations, renames and removals in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	return errors.Join(serr, d.Close())
}

// CreateExclusive creates path, which must not exist, with mode perm from the first byte: the
// open itself asks for perm (so no wider mode is ever visible), and the mode is then set to
// exactly perm, before anything is written, to undo a umask that narrowed it. Secrets and backups
// are created this way; never create wide and chmod later.
func CreateExclusive(path string, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close() // the chmod's error is the one to report
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}
