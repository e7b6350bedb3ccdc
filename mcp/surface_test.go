package mcp_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/mcp"
)

// maxSurfaceTokens bounds what the server's tool and resource lists cost a client's context:
// the tools/list, resources/list and resources/templates/list answers together, in tokens
// estimated as bytes / 4.
const maxSurfaceTokens = 3000

// wire records the lines a LoggingTransport writes.
type wire struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// last is the last message the client read (the answer to its last request).
func (w *wire) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(w.buf.String()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m, ok := strings.CutPrefix(lines[i], "read: "); ok {
			return m
		}
	}
	return ""
}

// The answers measured are the bytes on the wire, as the client read them.
func TestSurfaceIsSmall(t *testing.T) {
	for _, proto := range []string{"2025-06-18", ""} {
		srv, err := mcp.NewServer(mcp.Options{Agent: "alice", Connect: mcp.DaemonOnly("/nonexistent"), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		st, ct := sdk.NewInMemoryTransports()
		ctx := testCtx(t)
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		w := &wire{}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
			&sdk.LoggingTransport{Transport: ct, Writer: w}, &sdk.ClientSessionOptions{ProtocolVersion: proto})
		if err != nil {
			t.Fatal(err)
		}
		var answers []string
		measure := func(what string, call func(context.Context) error) {
			if err := call(ctx); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			a := w.last()
			if !strings.Contains(a, `"result"`) {
				t.Fatalf("%s: the last message read is not its answer: %s", what, a)
			}
			answers = append(answers, a)
			t.Logf("protocol %q %s: %d bytes, ~%d tokens", proto, what, len(a), len(a)/4)
		}
		measure("tools/list", func(ctx context.Context) error { _, err := cs.ListTools(ctx, nil); return err })
		measure("resources/list", func(ctx context.Context) error { _, err := cs.ListResources(ctx, nil); return err })
		measure("resources/templates/list", func(ctx context.Context) error { _, err := cs.ListResourceTemplates(ctx, nil); return err })
		total := 0
		for _, a := range answers {
			total += len(a)
		}
		t.Logf("protocol %q: %d bytes, ~%d tokens together", proto, total, total/4)
		if total/4 >= maxSurfaceTokens {
			t.Errorf("protocol %q: the lists cost ~%d tokens, want under %d", proto, total/4, maxSurfaceTokens)
		}
		cs.Close()
		ss.Wait()
	}
}
