package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

func TestRelayKeygen(t *testing.T) {
	cmd := newRelayCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"keygen"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimSpace(out.String())
	k, err := mbx.SigningKeyFromSeed(seed)
	if err != nil {
		t.Fatalf("keygen printed %q: %v", seed, err)
	}
	if !strings.Contains(errOut.String(), k.Fingerprint()) || strings.Contains(errOut.String(), seed) {
		t.Fatalf("stderr = %q: want the fingerprint and not the secret", errOut.String())
	}
}

func TestRelayServeListensAndStops(t *testing.T) {
	dir := t.TempDir()
	addrFile := filepath.Join(t.TempDir(), "addr")
	t.Setenv(relayserver.EnvRelayKey, "")
	t.Setenv(relayserver.EnvRelayDir, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRelayCmd()
	cmd.SetArgs([]string{"serve", "--listen", "127.0.0.1:0", "--addr-file", addrFile, "--trust-proxy", "xff"})
	cmd.SetOut(&bytes.Buffer{})
	stderr := &testkit.SyncBuffer{}
	cmd.SetErr(stderr)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var addr string
	for deadline := time.Now().Add(60 * time.Second); addr == ""; {
		if b, err := os.ReadFile(addrFile); err == nil {
			addr = strings.TrimSpace(string(b))
		} else if time.Now().After(deadline) {
			t.Fatal("relay serve did not write its address")
		}
		select {
		case err := <-done:
			t.Fatalf("relay serve exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	resp, err := http.Get("http://" + addr + "/v2/relay/info")
	if err != nil {
		t.Fatal(err)
	}
	var info mbx.InfoResponse
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.V != 2 || !mbx.ValidPublicKey(info.RelayPubkey) {
		t.Fatalf("info = %+v, %v", info, err)
	}
	if _, err := os.Stat(filepath.Join(dir, relayserver.KeyFile)); err != nil {
		t.Fatalf("relay.key was not created in the store dir: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay serve after cancel: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("relay serve did not stop")
	}
	fp := mbx.Fingerprint(info.RelayPubkey)
	want := "relay key fingerprint: " + fp + " (pin it with: agentmbx relay set http://" + addr + " --key " + fp + ")\n"
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks the line to copy %q:\n%s", want, stderr.String())
	}
}

func TestRelayServeNeedsStoreDir(t *testing.T) {
	t.Setenv(relayserver.EnvRelayDir, "")
	cmd := newRelayCmd()
	cmd.SetArgs([]string{"serve"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	var ue *usageError
	if err := cmd.Execute(); err == nil || !errors.As(err, &ue) {
		t.Fatalf("serve without a store dir = %v, want a usage error", err)
	}
}

// runRelay runs `agentmbx relay args...` and returns stdout, stderr and the error.
func runRelay(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRelayCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func storeEpoch(t *testing.T, dir string) string {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := st.Meta(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m.Epoch
}

func TestRelayBackupRestoreRotateEpoch(t *testing.T) {
	t.Setenv(relayserver.EnvRelayDir, "")
	dir := t.TempDir()
	epoch := storeEpoch(t, dir)
	file := filepath.Join(t.TempDir(), "backup.db")

	// backup and rotate-epoch while the store is held: backup works, the others refuse.
	ctx := context.Background()
	held, err := sqlitestore.Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := runRelay(t, "backup", file, "--store-dir", dir); err != nil || !strings.Contains(out, epoch) {
		t.Fatalf("backup while the store is open = %q, %v", out, err)
	}
	for _, args := range [][]string{{"restore", file, "--store-dir", dir}, {"rotate-epoch", "--store-dir", dir}} {
		if _, _, err := runRelay(t, args...); !errors.Is(err, relayserver.ErrLocked) {
			t.Fatalf("%s while the store is open = %v, want ErrLocked", args[0], err)
		}
	}
	held.Close()
	if got := storeEpoch(t, dir); got != epoch {
		t.Fatalf("refused commands changed the epoch %s → %s", epoch, got)
	}

	out, errOut, err := runRelay(t, "restore", file, "--store-dir", dir)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	restored := storeEpoch(t, dir)
	if restored == epoch || !strings.Contains(out, restored) || !strings.Contains(errOut, "relay store restored") {
		t.Fatalf("restore: epoch %s → %s, stdout %q, log %q", epoch, restored, out, errOut)
	}

	out, _, err = runRelay(t, "rotate-epoch", "--store-dir", dir)
	if err != nil {
		t.Fatalf("rotate-epoch: %v", err)
	}
	if rotated := storeEpoch(t, dir); rotated == restored || !strings.Contains(out, rotated) {
		t.Fatalf("rotate-epoch: epoch %s → %s, stdout %q", restored, rotated, out)
	}

	bad := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(bad, bytes.Repeat([]byte("junk"), 2000), 0o600); err != nil {
		t.Fatal(err)
	}
	before := storeEpoch(t, dir)
	if _, _, err := runRelay(t, "restore", bad, "--store-dir", dir); !errors.Is(err, relayserver.ErrBadBackup) {
		t.Fatalf("restore of junk = %v, want ErrBadBackup", err)
	}
	if got := storeEpoch(t, dir); got != before {
		t.Fatalf("a refused restore changed the epoch %s → %s", before, got)
	}
	var ue *usageError
	for _, args := range [][]string{{"backup", file}, {"restore", file}, {"rotate-epoch"}} {
		if _, _, err := runRelay(t, args...); !errors.As(err, &ue) {
			t.Fatalf("%s without a store dir = %v, want a usage error", args[0], err)
		}
	}
	if _, _, err := runRelay(t, "rotate-epoch", "--store-dir", t.TempDir()); err == nil {
		t.Fatal("rotate-epoch of an empty directory succeeded")
	}
}
