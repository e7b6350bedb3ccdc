package fsutil

import (
	"errors"
	"os"
	"path/filepath"
)

// Reserve makes path a file of size bytes whose disk blocks are allocated (0600), replacing any
// file there; the reserve frees its space when it is removed. On an error nothing is left at
// path.
func Reserve(path string, size int64) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	err = preallocate(tmp, size)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(err, os.Remove(path))
	}
	return os.Rename(tmp.Name(), path)
}
