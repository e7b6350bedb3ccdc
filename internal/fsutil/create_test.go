package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCreateExclusiveModeWhateverTheUmask: the file is exactly perm under a umask that would
// widen nothing and under one that would narrow it, and an existing file is refused untouched.
func TestCreateExclusiveModeWhateverTheUmask(t *testing.T) {
	dir := t.TempDir()
	for i, mask := range []int{0, 0o022, 0o277} {
		old := syscall.Umask(mask)
		path := filepath.Join(dir, "secret"+string(rune('a'+i)))
		f, err := CreateExclusive(path, 0o600)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("x"); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("umask %04o: mode %v, want 0600", mask, fi.Mode().Perm())
		}
		if _, err := CreateExclusive(path, 0o600); !errors.Is(err, fs.ErrExist) {
			t.Errorf("umask %04o: second create: %v, want ErrExist", mask, err)
		}
		if b, _ := os.ReadFile(path); string(b) != "x" {
			t.Errorf("the refused create changed the file: %q", b)
		}
	}
}
