package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/mcp"
)

// bearer adds a bearer token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestLoadToken(t *testing.T) {
	home := t.TempDir()
	tok, err := mcp.LoadToken(home)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, mcp.TokenFile)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || len(tok) != 43 {
		t.Fatalf("token %q (%d chars), file %v %v: want 43 characters, mode 0600", tok, len(tok), st, err)
	}
	if again, err := mcp.LoadToken(home); err != nil || again != tok {
		t.Fatalf("second load = %q %v, want the same token", again, err)
	}
	if other, _ := mcp.LoadToken(t.TempDir()); other == tok {
		t.Fatal("two homes drew the same token")
	}
	os.Chmod(path, 0o644)
	if _, err := mcp.LoadToken(home); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a token others may read: %v, want a refusal saying chmod 600", err)
	}
	os.Chmod(path, 0o600)
	os.WriteFile(path, []byte("short\n"), 0o600)
	if _, err := mcp.LoadToken(home); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Fatalf("a file without a token: %v", err)
	}
}

// The tools and the subscriptions over Streamable HTTP with the token; without it, or with
// another, nothing.
func TestStreamableHTTP(t *testing.T) {
	h, home := newHost(t, "alpha")
	serveSocket(t, h, home)
	tok, err := mcp.LoadToken(home)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.NewServer(mcp.Options{Agent: "bob", Connect: mcp.DaemonOnly(home), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mcp.HTTPHandler(srv, tok))
	t.Cleanup(hs.Close)

	connect := func(token string, updates chan string) (*sdk.ClientSession, error) {
		tr := &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: bearer{token}}}
		opts := &sdk.ClientOptions{}
		if updates != nil {
			opts.ResourceUpdatedHandler = func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) { updates <- r.Params.URI }
		}
		return sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(testCtx(t), tr, &sdk.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	}
	for _, bad := range []string{"", tok + "x", strings.ToUpper(tok), tok[:42]} {
		if cs, err := connect(bad, nil); err == nil {
			cs.Close()
			t.Errorf("token %q was let in", bad)
		} else if !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
			t.Errorf("token %q: %v, want 401", bad, err)
		}
	}
	// A request without the header gets 401 before its body is read.
	resp, err := http.Post(hs.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: status %d, want 401", resp.StatusCode)
	}

	updates := make(chan string, 16)
	bob, err := connect(tok, updates)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bob.Close() })
	who, _ := ok[mcp.WhoAmI](t, bob, "mbx_whoami", nil)
	if who.Address != "bob@alpha" || !who.Daemon {
		t.Fatalf("whoami over HTTP = %+v", who)
	}
	if err := bob.Subscribe(testCtx(t), &sdk.SubscribeParams{URI: mcp.InboxURI}); err != nil {
		t.Fatal(err)
	}
	alice := session(t, "alice", mcp.DaemonOnly(home))
	sent, _ := ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"bob"}, "body": "over http"})
	if uri := next(t, updates); uri != mcp.InboxURI {
		t.Fatalf("update for %s", uri)
	}
	m, txt := ok[mcp.Message](t, bob, "mbx_read", map[string]any{"id": sent.ID})
	if m.Body != "over http" || !strings.Contains(txt, "<<end untrusted mail "+m.Fence+">>") {
		t.Fatalf("read over HTTP = %+v %q", m, txt)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8765": true, "[::1]:0": true, "localhost:1": true, "127.9.9.9:1": true,
		":8765": false, "0.0.0.0:1": false, "192.168.1.2:1": false, "example.com:1": false, "127.0.0.1": false} {
		if got := mcp.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
