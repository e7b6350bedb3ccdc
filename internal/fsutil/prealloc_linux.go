package fsutil

import (
	"os"
	"syscall"
)

// preallocate reserves size bytes of disk for f without writing them.
func preallocate(f *os.File, size int64) error {
	return syscall.Fallocate(int(f.Fd()), 0, 0, size)
}
