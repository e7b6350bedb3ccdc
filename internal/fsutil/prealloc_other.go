//go:build !linux

package fsutil

import "os"

// preallocate reserves size bytes of disk for f by writing zeros.
func preallocate(f *os.File, size int64) error {
	zero := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(zero)) {
		if _, err := f.Write(zero[:min(left, int64(len(zero)))]); err != nil {
			return err
		}
	}
	return nil
}
