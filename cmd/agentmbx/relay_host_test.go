package main

// End-to-end through a real relay process: two host daemons (child processes) with no LAN route
// between them (their peers are pinned from cards without an address) exchange mail, delivery
// receipts and replies through `agentmbx relay serve`, also across a relay restart.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/relayserver"
)

// relayProc is a relay running as a child process.
type relayProc struct {
	t    *testing.T
	dir  string // the store directory
	addr string // host:port
	p    *testkit.Proc
	log  *testkit.SyncBuffer
}

// startRelayProc runs `agentmbx relay serve` on listen (127.0.0.1:0 for a free port) over the
// store in dir and waits until it listens.
func startRelayProc(t *testing.T, dir, listen string) *relayProc {
	t.Helper()
	r := startRelay(t, dir+".addr", []string{relayserver.EnvRelayKey + "="}, "--store-dir", dir, "--listen", listen)
	r.dir = dir
	return r
}

// startRelay runs `agentmbx relay serve args... --addr-file addrFile` with env added to the
// environment and waits until it listens.
func startRelay(t *testing.T, addrFile string, env []string, args ...string) *relayProc {
	t.Helper()
	os.Remove(addrFile)
	cmd := exec.Command(agentmbxPath(t), append(append([]string{"relay", "serve"}, args...), "--addr-file", addrFile)...)
	cmd.Env = childEnv(env...)
	p := testkit.StartProc(t, cmd)
	return &relayProc{t: t, p: p, log: p.Log, addr: p.WaitAddr(t, addrFile)}
}

// stop sends SIGTERM and waits for a clean exit.
func (r *relayProc) stop() {
	r.t.Helper()
	if err := r.p.Stop(r.t); err != nil {
		r.t.Fatalf("relay exited with %v after SIGTERM\n%s", err, r.log.String())
	}
}

// pinWithoutLAN pins every node to every other from a card that names no LAN address: the hosts
// can reach each other through the relay only.
func pinWithoutLAN(t *testing.T, nodes ...*node) {
	t.Helper()
	for _, a := range nodes {
		card := a.must("id", "--card")
		for _, b := range nodes {
			if a != b {
				b.mustIn(card, "peers", "add", "-", "--yes")
			}
		}
	}
}

// relayStatus runs `relay status --json`, which exits 1 while relay use is stopped.
func (n *node) relayStatus() api.RelayStatus {
	n.t.Helper()
	r := n.run("relay", "status", "--json")
	var st api.RelayStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || (r.code != 0 && !(r.code == 1 && relayBlocked(st) != "")) {
		n.t.Fatalf("%s: relay status --json: exit %d, %v\n%s%s", n.name, r.code, err, r.stdout, r.stderr)
	}
	return st
}

func TestE2ERelayNoLANRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	relay := startRelayProc(t, filepath.Join(dir, "relay"), freePort(t))
	url := "http://" + relay.addr
	a, b := newNode(t, dir, "alpha"), newNode(t, dir, "beta")
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	pinWithoutLAN(t, a, b)
	for _, n := range []*node{a, b} {
		for _, p := range func() []api.Peer { var ps []api.Peer; n.mustJSON(&ps, "peers"); return ps }() {
			if p.Addr != "" {
				t.Fatalf("%s pinned %s with LAN address %s", n.name, p.Host, p.Addr)
			}
		}
	}

	// alpha pins the relay without a daemon (trust on first use), beta with the key through its
	// running daemon.
	out := a.must("relay", "set", url)
	m := regexp.MustCompile(`(?m)^fingerprint: (\S+)$`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "trusted on first use") {
		t.Fatalf("relay set printed:\n%s", out)
	}
	fp := m[1]
	b.start()
	if r := b.run("relay", "set", url, "--key", "0000-0000-0000-0000"); r.code == 0 || !strings.Contains(r.stderr, "another key") {
		t.Fatalf("relay set with a wrong --key: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := b.must("relay", "set", url, "--key", fp); strings.Contains(out, "trusted on first use") {
		t.Fatalf("relay set --key printed:\n%s", out)
	}
	a.start()
	for _, n := range []*node{a, b} {
		n.waitFor("enrolment at the relay", func() (bool, string) {
			st := n.relayStatus()
			return st.Enrolled && st.Senders == 1 && st.EncAdExp != "" && st.Daemon, fmt.Sprintf("%+v", st)
		})
	}

	id := a.send("alice", "bob@beta", "through the relay", "no LAN between us")
	got := b.waitMail("bob", id)
	if got.Body != "no LAN between us" || got.From != "alice@alpha" {
		t.Fatalf("bob got %+v", got)
	}
	b.must("ack", id, "--as", "bob", "--note", "seen")
	a.waitSent(id, "acked", "bob@beta")
	rows := a.outboxRows(id)
	if len(rows) != 1 || rows[0].State != "done" || rows[0].Transport != "relay" || rows[0].Relay != url ||
		rows[0].Seq <= 0 || rows[0].Epoch == "" || rows[0].AcceptedAt == "" || rows[0].Deadline == "" {
		t.Fatalf("alpha's outbox row = %+v", rows)
	}

	// The relay restarts (same store, same port) while a message is on its way.
	relay.stop()
	id2 := a.send("alice", "bob@beta", "while the relay was down", "queued at alpha")
	a.waitFor("a failed push", func() (bool, string) {
		rows := a.outboxRows(id2)
		return len(rows) == 1 && rows[0].Attempts > 0 && rows[0].State == "pending", fmt.Sprintf("%+v", rows)
	})
	startRelayProc(t, relay.dir, relay.addr) // the same relay back; its cleanup stops it
	b.waitMail("bob", id2)
	a.waitSent(id2, "delivered", "bob@beta")

	// And back.
	rep := b.send("bob", "alice@alpha", "re: through the relay", "reply by relay")
	a.waitMail("alice", rep)
	b.waitSent(rep, "notified", "alice@alpha")

	var q []api.QuarantineItem
	for _, n := range []*node{a, b} {
		n.mustJSON(&q, "relay", "quarantine")
		if len(q) != 0 {
			t.Fatalf("%s quarantined %+v", n.name, q)
		}
		st := n.relayStatus()
		if st.Stopped || st.RelayAccepted != 0 || st.ReceivedThrough == 0 || st.Fingerprint != fp {
			t.Fatalf("%s relay status = %+v", n.name, st)
		}
	}
	if out := a.must("relay", "status"); !strings.Contains(out, "in use") || !strings.Contains(out, fp) {
		t.Fatalf("relay status printed:\n%s", out)
	}
	a.stop()
	b.stop()

	// Without a daemon the commands work on the store.
	st := a.relayStatus()
	if st.Daemon || !st.Configured {
		t.Fatalf("status without a daemon = %+v", st)
	}
	a.must("relay", "unset")
	var after api.RelayStatus
	if err := json.Unmarshal([]byte(a.must("relay", "status", "--json")), &after); err != nil || after.Configured {
		t.Fatalf("status after unset = %+v, %v", after, err)
	}
}
