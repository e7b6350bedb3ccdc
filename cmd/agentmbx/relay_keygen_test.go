package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
)

// TestRelayKeygenOut: --out writes the key into a new file that is 0600 even under umask 0,
// says the fingerprint (never the key) on stderr and prints nothing on stdout; a second run
// refuses the existing file and leaves it as it was.
func TestRelayKeygenOut(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "relay.seed")
	var out, errOut strings.Builder
	cmd := newRelayCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"keygen", "--out", path})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s is %v under umask 0, want 0600", path, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	seed := strings.TrimSpace(string(b))
	k, err := mbx.SigningKeyFromSeed(seed)
	if err != nil {
		t.Fatalf("the file holds %q: %v", b, err)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), k.Fingerprint()) || strings.Contains(errOut.String(), seed) {
		t.Fatalf("stdout %q, stderr %q: want nothing, and the fingerprint without the key", out.String(), errOut.String())
	}

	_, stderr, code := runCLI(t, "relay", "keygen", "--out", path)
	if code == 0 || !strings.Contains(stderr, "exists") {
		t.Fatalf("second keygen --out: code %d, %s", code, stderr)
	}
	if after, _ := os.ReadFile(path); string(after) != string(b) {
		t.Fatal("the refused keygen changed the key file")
	}
}
