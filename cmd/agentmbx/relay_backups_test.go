package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// TestRelayServeScheduledBackups: a real relay process with --backup-dir takes its first backup
// at start (the directory has none), logs it, and `relay backups` shows it; the restored backup
// is a relay store. Bad schedules are usage errors.
func TestRelayServeScheduledBackups(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	backups := filepath.Join(dir, "backups")
	relay := startRelay(t, filepath.Join(dir, "relay.addr"), []string{relayserver.EnvRelayKey + "="},
		"--store-dir", filepath.Join(dir, "relay"), "--listen", "127.0.0.1:0",
		"--backup-dir", backups, "--backup-every", "1h", "--backup-keep", "2")
	var rep backupsReport
	deadline := time.Now().Add(e2eWait)
	for {
		out, _, code := runCLI(t, "relay", "backups", backups, "--json")
		if code == 0 && json.Unmarshal([]byte(out), &rep) == nil && rep.Status.LastSuccess != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled backup after %s:\n%s\n%s", e2eWait, out, relay.log.String())
		}
		time.Sleep(50 * time.Millisecond) // a real relay process taking its backup
	}
	if len(rep.Files) != 1 || rep.Files[0].Name != rep.Status.LastFile || rep.Status.LastEpoch == "" {
		t.Fatalf("relay backups: %+v", rep)
	}
	if fi, err := os.Stat(filepath.Join(backups, rep.Status.LastFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	relay.stop()
	if !strings.Contains(relay.log.String(), "scheduled backup taken") {
		t.Fatalf("the relay did not log its backup:\n%s", relay.log.String())
	}
	out, _, code := runCLI(t, "relay", "backups", backups)
	if code != 0 || !strings.Contains(out, "last success: "+rep.Status.LastSuccess) || !strings.Contains(out, rep.Status.LastFile) {
		t.Fatalf("relay backups: exit %d\n%s", code, out)
	}
	restored := filepath.Join(dir, "restored")
	if out, errOut, code := runCLI(t, "relay", "restore", filepath.Join(backups, rep.Status.LastFile), "--store-dir", restored); code != 0 {
		t.Fatalf("restore of a scheduled backup: %s %s", out, errOut)
	}
	for _, args := range [][]string{
		{"--backup-dir", backups, "--backup-every", "1s"},
		{"--backup-dir", backups, "--backup-keep", "0"},
		{"--backup-every", "1h"},
		{"--backup-dir", backups, "--db", "postgres://x/y"},
	} {
		_, errOut, code := runCLI(t, append([]string{"relay", "serve", "--store-dir", filepath.Join(dir, "relay")}, args...)...)
		if code != 2 {
			t.Errorf("relay serve %v: exit %d, %s; want a usage error", args, code, errOut)
		}
	}
}
