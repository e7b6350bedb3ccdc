package main

// End-to-end through MCP: two relay-only hosts with a real relay process, an `agentmbx mcp`
// child process on each, driven by the official SDK's client over stdio.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mcp"
)

// mcpChild is an `agentmbx mcp` child process and the SDK client session on its stdio.
type mcpChild struct {
	t      *testing.T
	name   string
	cs     *sdk.ClientSession
	stderr *testkit.SyncBuffer
}

// startMCP runs `agentmbx mcp --home H` for agent (by --as, or by MBX_AGENT with byEnv) and
// connects the SDK's client to it.
func (n *node) startMCP(agent string, byEnv bool) *mcpChild {
	n.t.Helper()
	return n.startMCPClient(agent, byEnv, nil, nil)
}

// startMCPClient is startMCP with the client's options.
func (n *node) startMCPClient(agent string, byEnv bool, copts *sdk.ClientOptions, sopts *sdk.ClientSessionOptions) *mcpChild {
	n.t.Helper()
	args := []string{"mcp", "--home", n.home}
	env := childEnv("MBX_HOME=/nonexistent/must-use-flag")
	if byEnv {
		env = append(env, envAgent+"="+agent)
	} else {
		args = append(args, "--as", agent)
	}
	cmd := exec.Command(agentmbxPath(n.t), args...)
	cmd.Env = env
	m := &mcpChild{t: n.t, name: agent + "@" + n.name, stderr: &testkit.SyncBuffer{}}
	cmd.Stderr = m.stderr
	ctx, cancel := context.WithTimeout(context.Background(), e2eCmd)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, copts).Connect(ctx, &sdk.CommandTransport{Command: cmd}, sopts)
	if err != nil {
		n.t.Fatalf("%s: start agentmbx mcp: %v\n%s", m.name, err, m.stderr.String())
	}
	m.cs = cs
	n.t.Cleanup(func() {
		cs.Close()
		if n.t.Failed() {
			n.t.Logf("%s mcp stderr:\n%s", m.name, m.stderr.String())
		}
	})
	return m
}

// call calls a tool; it returns the structured content decoded into out, the text, and whether
// the tool failed.
func (m *mcpChild) call(name string, args map[string]any, out any) (string, bool) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait+mcp.MaxWaitSeconds*time.Second)
	defer cancel()
	res, err := m.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		m.t.Fatalf("%s: %s: %v\n%s", m.name, name, err, m.stderr.String())
	}
	var txt strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			txt.WriteString(tc.Text)
		}
	}
	m.t.Logf("%s → %s %v\n%s", m.name, name, args, txt.String()) // the transcript, shown with -v or on failure
	if !res.IsError && out != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			m.t.Fatalf("%s: %s: structured content %s: %v", m.name, name, raw, err)
		}
	}
	return txt.String(), res.IsError
}

// must calls a tool that has to succeed.
func (m *mcpChild) must(name string, args map[string]any, out any) string {
	m.t.Helper()
	txt, failed := m.call(name, args, out)
	if failed {
		m.t.Fatalf("%s: %s(%v): tool error %q", m.name, name, args, txt)
	}
	return txt
}

// waitNew calls mbx_wait until every id in want has been listed, and fails if one is listed
// twice or an id not in want shows up.
func (m *mcpChild) waitNew(want ...string) {
	m.t.Helper()
	seen := map[string]int{}
	deadline := time.Now().Add(e2eWait)
	for len(seen) < len(want) {
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: mbx_wait listed %v, want %v", m.name, seen, want)
		}
		var l mcp.Listing
		m.must("mbx_wait", map[string]any{"timeout_s": 10}, &l)
		for _, it := range l.Messages {
			if !slices.Contains(want, it.ID) {
				m.t.Fatalf("%s: mbx_wait listed %s, not one of %v", m.name, it.ID, want)
			}
			if seen[it.ID]++; seen[it.ID] > 1 {
				m.t.Fatalf("%s: mbx_wait listed %s twice", m.name, it.ID)
			}
		}
	}
}

// waitState polls mbx_sent until recipient shows state.
func (m *mcpChild) waitState(id, recipient, state string) api.Sent {
	m.t.Helper()
	var s api.Sent
	deadline := time.Now().Add(e2eWait)
	for {
		m.must("mbx_sent", map[string]any{"id": id}, &s)
		for _, r := range s.Recipients {
			if r.Recipient == recipient && r.State == state {
				return s
			}
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: %s never showed %s %s: %+v", m.name, id, recipient, state, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestE2EMCPTwoHostsThroughRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	relay := startRelayProc(t, filepath.Join(dir, "relay"), freePort(t))
	url := "http://" + relay.addr
	a, b := newNode(t, dir, "alpha"), newNode(t, dir, "beta")
	pinWithoutLAN(t, a, b)
	a.must("relay", "set", url)
	b.must("relay", "set", url)
	a.start()
	b.start()
	for _, n := range []*node{a, b} {
		n.waitFor("enrolment at the relay", func() (bool, string) {
			st := n.relayStatus()
			return st.Enrolled && st.Senders == 1 && st.EncAdExp != "", fmt.Sprintf("%+v", st)
		})
	}
	alice, bob := a.startMCP("alice", false), b.startMCP("bob", true)

	var who mcp.WhoAmI
	bob.must("mbx_whoami", nil, &who)
	if who.Address != "bob@beta" || !who.Daemon || !who.Relay.Enrolled {
		t.Fatalf("bob's whoami = %+v", who)
	}

	// bob waits before the mail exists; alice sends through her daemon and the relay.
	waited := make(chan mcp.Listing, 1)
	go func() {
		var l mcp.Listing
		if txt, failed := bob.call("mbx_wait", map[string]any{"timeout_s": 120}, &l); failed {
			t.Errorf("bob's mbx_wait: %s", txt)
		}
		waited <- l
	}()
	body := "Deploy at 14:00?\nReply here."
	var s1 mcp.Sent
	alice.must("mbx_send", map[string]any{"to": []string{"bob@beta"}, "subject": "deploy", "body": body}, &s1)
	if !slices.Equal(s1.Hosts, []string{"beta"}) || s1.Queued {
		t.Fatalf("alice's send = %+v", s1)
	}
	select {
	case l := <-waited:
		if len(l.Messages) != 1 || l.Messages[0].ID != s1.ID || l.Messages[0].From != "alice@alpha" {
			t.Fatalf("bob's wait = %+v, want %s", l, s1.ID)
		}
	case <-time.After(e2eWait + 120*time.Second):
		t.Fatal("bob's mbx_wait never returned")
	}
	var msg mcp.Message
	bob.must("mbx_read", map[string]any{"id": s1.ID}, &msg)
	if msg.Body != body || msg.State != "read" {
		t.Fatalf("bob read %+v", msg)
	}
	bob.must("mbx_ack", map[string]any{"id": s1.ID, "note": "on it"}, nil)
	sent := alice.waitState(s1.ID, "bob@beta", "acked")
	if sent.Recipients[0].Note != "on it" || len(sent.Rows) != 1 || sent.Rows[0].Transport != "relay" {
		t.Fatalf("alice's mbx_sent = %+v", sent)
	}

	// Daemons restart in the middle. beta's is killed; bob's wait says it needs the daemon.
	b.kill()
	if txt, failed := bob.call("mbx_wait", map[string]any{"timeout_s": 1}, nil); !failed || !strings.Contains(txt, "agentmbx daemon") {
		t.Fatalf("bob's wait without a daemon: failed=%v %q", failed, txt)
	}
	// alice replies in the thread through her daemon, which is killed right after the answer;
	// then, with no daemon, she sends again: it is queued on the store.
	var r2 mcp.Sent
	alice.must("mbx_reply", map[string]any{"id": s1.ID, "body": "thanks"}, &r2) // her own message: to bob
	a.kill()
	var s3 mcp.Sent
	txt := alice.must("mbx_send", map[string]any{"to": []string{"bob@beta"}, "body": "sent while no daemon ran"}, &s3)
	if !s3.Queued || !strings.Contains(txt, "queued") {
		t.Fatalf("alice's send without a daemon = %+v %q", s3, txt)
	}
	a.start()
	b.start()
	bob.waitNew(r2.ID, s3.ID)

	var all mcp.Listing
	bob.must("mbx_inbox", map[string]any{"all": true}, &all)
	var ids []string
	for _, it := range all.Messages {
		ids = append(ids, it.ID)
	}
	if want := []string{s1.ID, r2.ID, s3.ID}; !slices.Equal(ids, want) || all.More != 0 {
		t.Fatalf("bob's whole mailbox = %v, want each of %v once", ids, want)
	}
	var th mcp.Thread
	bob.must("mbx_thread", map[string]any{"id": r2.ID}, &th)
	if len(th.Messages) != 2 || th.Messages[0].ID != s1.ID || th.Messages[1].ID != r2.ID {
		t.Fatalf("bob's thread = %+v", th)
	}
	var found mcp.Found
	bob.must("mbx_search", map[string]any{"query": "deploy"}, &found) // the subject and its "Re:"
	if len(found.Messages) != 2 || found.Messages[0].ID != r2.ID || found.Messages[1].ID != s1.ID {
		t.Fatalf("bob's search = %+v", found)
	}
	alice.waitState(s3.ID, "bob@beta", "notified")
	var ags mcp.Agents
	alice.must("mbx_agents", nil, &ags)
	if len(ags.Known) != 1 || ags.Known[0].Address != "bob@beta" {
		t.Fatalf("alice's agents = %+v, want bob@beta known", ags)
	}
	a.stop()
	b.stop()
}
