package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/relayserver"
)

// waitFile waits for a file written once a server listens and returns its trimmed content.
func waitFile(t *testing.T, path string, done <-chan error) string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", path)
		}
		select {
		case err := <-done:
			t.Fatalf("the command exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRelayServeOpsFlags runs `relay serve --log-format json --log-level debug --metrics-listen`
// with a metrics token: health on the main listener, metrics on both (behind the token on the
// main one), and a log of JSON lines.
func TestRelayServeOpsFlags(t *testing.T) {
	dir := t.TempDir()
	addrFile, metricsFile := filepath.Join(dir, "addr"), filepath.Join(dir, "metrics-addr")
	t.Setenv(relayserver.EnvRelayKey, "")
	t.Setenv(envMetricsToken, "tok-123")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRelayCmd()
	cmd.SetArgs([]string{"serve", "--store-dir", filepath.Join(dir, "store"), "--listen", "127.0.0.1:0",
		"--addr-file", addrFile, "--metrics-listen", "127.0.0.1:0", "--metrics-addr-file", metricsFile,
		"--log-format", "json", "--log-level", "debug"})
	var stderr testkit.SyncBuffer
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&stderr)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	base := "http://" + waitFile(t, addrFile, done)
	mbase := "http://" + waitFile(t, metricsFile, done)

	if code, body := httpGet(t, base+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/readyz", ""); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if code, _ := httpGet(t, base+"/metrics", ""); code != 401 {
		t.Fatalf("/metrics on the main listener without the token = %d, want 401", code)
	}
	for _, u := range []struct{ url, token string }{{base + "/metrics", "tok-123"}, {mbase + "/metrics", ""}} {
		code, body := httpGet(t, u.url, u.token)
		if code != 200 || !strings.Contains(body, "agentmbx_relay_epoch_info{") || !strings.Contains(body, `agentmbx_relay_requests_total{route="GET /healthz",status="200"} 1`) {
			t.Fatalf("%s = %d:\n%s", u.url, code, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay serve: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", line)
		}
	}
	if out := stderr.String(); !strings.Contains(out, `"msg":"relay request"`) || !strings.Contains(out, `"msg":"relay drained"`) {
		t.Fatalf("the debug log lacks request or drain lines:\n%s", out)
	}
}

func TestRelayServeBadLogFlags(t *testing.T) {
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		_, _, err := runRelay(t, append([]string{"serve", "--store-dir", t.TempDir()}, args...)...)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Fatalf("serve %v = %v, want a usage error", args, err)
		}
	}
}
