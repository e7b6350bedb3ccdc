//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"
)

// osOwnerFS reads owners from the real file system.
type osOwnerFS struct{}

func (osOwnerFS) Lstat(path string) (owner, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return owner{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}, fmt.Errorf("%s: no owner information", path)
	}
	return owner{UID: st.Uid, GID: st.Gid, Mode: fi.Mode()}, nil
}

func (osOwnerFS) Readlink(path string) (string, error) { return os.Readlink(path) }
