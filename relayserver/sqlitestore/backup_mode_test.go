package sqlitestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

// envBackupChild names "STOREDIR|DEST" for the child of TestBackupTempFileIsPrivateFromTheStart.
const envBackupChild = "MBX_SQLITESTORE_BACKUP_CHILD"

// TestBackupTempFileIsPrivateFromTheStart: a backup's temporary file is 0600 while the copy is
// in it, under a umask that would leave a new file 0644. A child process with umask 022 runs
// Backup and is SIGKILLed at FailBackupCopied, right after VACUUM INTO filled the file and
// before anything else touches it; the file it leaves must be 0600 and hold the copy.
func TestBackupTempFileIsPrivateFromTheStart(t *testing.T) {
	if job := os.Getenv(envBackupChild); job != "" {
		dir, dest, _ := strings.Cut(job, "|")
		syscall.Umask(0o022)
		failpoint.Enable(FailBackupCopied, failpoint.Kill)
		_, err := Backup(context.Background(), dir, dest)
		fmt.Fprintln(os.Stderr, "backup returned without the failpoint:", err)
		os.Exit(3)
	}
	dir, out := t.TempDir(), t.TempDir()
	s, err := Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	dest := filepath.Join(out, "relay.backup")
	testkit.RunKilled(t, testkit.Child(t.Name(), envBackupChild+"="+dir+"|"+dest), "backup child")

	left, err := filepath.Glob(dest + ".tmp-*")
	if err != nil || len(left) == 0 {
		t.Fatalf("no temporary file left beside %s (%v)", dest, err)
	}
	for _, p := range left {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, "-journal") || strings.HasSuffix(p, "-wal") {
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s is %v, want 0600", p, fi.Mode().Perm())
			}
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("the backup's temporary file %s is %v while it holds the copy, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
		if fi.Size() == 0 {
			t.Errorf("%s is empty: the failpoint fired before the copy", p)
		}
	}
	if _, err := os.Stat(dest); err == nil {
		t.Errorf("%s exists although the backup was killed before the rename", dest)
	}
}
