package mcp_test

import (
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mcp"
)

// TestReadToolsAreScopedToTheCaller: alice writes to bob, bob replies and acknowledges with a
// note; carol, a third agent of the same host, sees none of it through any read tool (mbx_inbox,
// mbx_read, mbx_thread, mbx_search, mbx_wait, mbx_sent), and bob, a recipient, does not get the
// delivery state of alice's message (other recipients' states and notes) from mbx_sent. Each
// tool is also shown to answer the caller's own mail, so a tool that answered nothing would fail.
func TestReadToolsAreScopedToTheCaller(t *testing.T) {
	h, home := newHost(t, "alpha")
	serveSocket(t, h, home)
	alice := session(t, "alice", mcp.DaemonOnly(home))
	bob := session(t, "bob", mcp.DaemonOnly(home))
	carol := session(t, "carol", mcp.DaemonOnly(home))
	ok[mcp.WhoAmI](t, bob, "mbx_whoami", nil) // registers bob
	ok[mcp.WhoAmI](t, carol, "mbx_whoami", nil)

	const secret = "vaultcode"
	sent, _ := ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"bob"}, "subject": "plan " + secret, "body": "the " + secret + " is 1234"})
	reply, _ := ok[mcp.Sent](t, bob, "mbx_reply", map[string]any{"id": sent.ID, "body": "got the " + secret})
	ok[mcp.Acked](t, bob, "mbx_ack", map[string]any{"id": sent.ID, "note": "ack note " + secret})
	mine, _ := ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"carol"}, "subject": "for carol", "body": "hello carol"})

	// hidden: no part of the other agents' messages, their reply or the note (the id or query
	// carol asked with may be echoed).
	hidden := func(tool, txt string) {
		t.Helper()
		for _, part := range []string{"plan " + secret, "is 1234", "got the", "ack note", "bob@alpha"} {
			if strings.Contains(txt, part) {
				t.Errorf("%s shows carol another agent's mail (%q): %q", tool, part, txt)
			}
		}
	}

	t.Run("mbx_inbox", func(t *testing.T) {
		l, txt := ok[mcp.Listing](t, carol, "mbx_inbox", map[string]any{"all": true})
		hidden("mbx_inbox", txt)
		if len(l.Messages) != 1 || l.Messages[0].ID != mine.ID {
			t.Fatalf("carol's inbox = %+v, want her one message", l)
		}
	})
	t.Run("mbx_wait", func(t *testing.T) {
		l, txt := ok[mcp.Listing](t, carol, "mbx_wait", map[string]any{"timeout_s": 0})
		hidden("mbx_wait", txt)
		for _, m := range l.Messages {
			if m.ID != mine.ID {
				t.Fatalf("carol's wait lists %s, not hers", m.ID)
			}
		}
	})
	t.Run("mbx_read", func(t *testing.T) {
		for _, id := range []string{sent.ID, reply.ID} {
			res := call(t, carol, "mbx_read", map[string]any{"id": id})
			if !res.IsError {
				t.Fatalf("carol read %s: %q", id, text(res))
			}
			hidden("mbx_read", text(res))
		}
		if m, _ := ok[mcp.Message](t, carol, "mbx_read", map[string]any{"id": mine.ID}); m.Body != "hello carol" {
			t.Fatalf("carol's own message = %+v", m)
		}
	})
	t.Run("mbx_thread", func(t *testing.T) {
		for _, id := range []string{sent.ID, reply.ID} {
			res := call(t, carol, "mbx_thread", map[string]any{"id": id})
			hidden("mbx_thread", text(res))
			if !res.IsError && len(res.StructuredContent.(map[string]any)["messages"].([]any)) != 0 {
				t.Fatalf("carol's thread of %s lists messages: %q", id, text(res))
			}
		}
		if th, _ := ok[mcp.Thread](t, carol, "mbx_thread", map[string]any{"id": mine.ID}); len(th.Messages) != 1 {
			t.Fatalf("carol's own thread = %+v", th)
		}
	})
	t.Run("mbx_search", func(t *testing.T) {
		f, txt := ok[mcp.Found](t, carol, "mbx_search", map[string]any{"query": secret})
		hidden("mbx_search", txt)
		if len(f.Messages) != 0 {
			t.Fatalf("carol's search for another agent's words = %+v", f)
		}
		if f, _ := ok[mcp.Found](t, carol, "mbx_search", map[string]any{"query": "carol"}); len(f.Messages) != 1 {
			t.Fatalf("carol's search of her own mail = %+v", f)
		}
	})
	t.Run("mbx_sent", func(t *testing.T) {
		res := call(t, carol, "mbx_sent", map[string]any{"id": sent.ID})
		if !res.IsError {
			t.Fatalf("carol saw the delivery state of alice's message: %q", text(res))
		}
		hidden("mbx_sent", text(res))
		if !strings.Contains(text(res), "not found") {
			t.Errorf("carol's mbx_sent error %q, want it to read as not found", text(res))
		}
		res = call(t, bob, "mbx_sent", map[string]any{"id": sent.ID})
		if !res.IsError || strings.Contains(text(res), "ack note") {
			t.Fatalf("bob, a recipient, saw the delivery state of alice's message: %q", text(res))
		}
		st, txt := ok[api.Sent](t, alice, "mbx_sent", map[string]any{"id": sent.ID})
		if len(st.Recipients) != 1 || st.Recipients[0].Note != "ack note "+secret || !strings.Contains(txt, "bob@alpha acked") {
			t.Fatalf("alice's own mbx_sent = %+v %q", st, txt)
		}
		if st, _ := ok[api.Sent](t, bob, "mbx_sent", map[string]any{"id": reply.ID}); len(st.Recipients) != 1 {
			t.Fatalf("bob's mbx_sent of his reply = %+v", st)
		}
	})
}
