package main

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/mcp"
)

// withBearer adds a bearer token to every request.
type withBearer string

func (b withBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func TestE2EMCPOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	a := newNode(t, e2eDir(t), "alpha")
	a.must("agents", "add", "bob")
	a.start()

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", "0.0.0.0:0"}, "not a loopback address"},
		{[]string{"--http", ":8765"}, "not a loopback address"},
		{[]string{"--http", "127.0.0.1"}, "host:port"},
		{[]string{"--allow-remote"}, "goes with --http"},
	} {
		r := a.run(append([]string{"mcp", "--as", "bob"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("mcp %v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}

	srv := a.background("mcp", "--as", "bob", "--http", "127.0.0.1:0")
	m := srv.waitLine(t, `^serving MCP for bob on (http://127\.0\.0\.1:\d+/) \(bearer token in (\S+)\)$`)
	st, err := os.Stat(m[2])
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v %v, want mode 0600", m[2], st, err)
	}
	data, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(data))
	connect := func(tok string) (*sdk.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), e2eCmd)
		defer cancel()
		tr := &sdk.StreamableClientTransport{Endpoint: m[1], HTTPClient: &http.Client{Transport: withBearer(tok)}}
		return sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
	}
	wrong := "A" + token[1:]
	if token[0] == 'A' {
		wrong = "B" + token[1:]
	}
	if cs, err := connect(wrong); err == nil {
		cs.Close()
		t.Fatal("a wrong token was let in")
	} else if !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Fatalf("a wrong token: %v, want 401", err)
	}
	cs, err := connect(token)
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), e2eCmd)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mbx_whoami"})
	if err != nil || res.IsError {
		t.Fatalf("mbx_whoami over HTTP: %v %+v", err, res)
	}
	if txt := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(txt, "bob@alpha") || !strings.Contains(txt, "the daemon is running") {
		t.Fatalf("mbx_whoami over HTTP: %q", txt)
	}
	if rl, err := cs.ListResources(ctx, nil); err != nil || len(rl.Resources) != 1 || rl.Resources[0].URI != mcp.InboxURI {
		t.Fatalf("resources over HTTP: %+v %v", rl, err)
	}
}
