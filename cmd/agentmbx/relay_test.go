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

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
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
	cmd.SetErr(&bytes.Buffer{})
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
