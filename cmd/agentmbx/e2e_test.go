package main

// End-to-end tests: real hosts, each a home with a daemon running as a child process (the test
// binary re-run as agentmbx, set up by testscript.Main in TestMain), talking to each other over
// loopback, driven by the command line only. Waits poll with generous timeouts and never assert
// on elapsed time.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

const (
	// e2eWait bounds every wait for something to happen between hosts.
	e2eWait = 90 * time.Second
	// e2eCmd bounds one command.
	e2eCmd = 60 * time.Second
	// e2eTick is the daemons' loop interval: short, so tests move along.
	e2eTick = "100ms"
)

// node is one host of a test: its home and, while it runs, its daemon.
type node struct {
	t    *testing.T
	name string
	home string
	addr string        // the daemon's LAN address (host:port), kept across restarts
	d    *testkit.Proc // the running daemon
	// daemonArgs are added to the daemon's command line.
	daemonArgs []string
}

// childEnv is the environment of a child agentmbx: this one, with extra, and without the second
// a race-enabled binary sleeps at every exit.
func childEnv(extra ...string) []string {
	env := append(os.Environ(), extra...)
	gorace := "atexit_sleep_ms=0"
	if v := os.Getenv("GORACE"); v != "" {
		gorace = v + " " + gorace
	}
	return append(env, "GORACE="+gorace)
}

func agentmbxPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("agentmbx")
	if err != nil {
		t.Fatalf("agentmbx is not on PATH (TestMain sets it up): %v", err)
	}
	return p
}

// e2eDir returns a fresh directory with a short path (the control socket path must stay under
// about 100 bytes).
func e2eDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// twoNodes skips in -short mode, else makes hosts alpha and beta in a fresh e2eDir.
func twoNodes(t *testing.T) (dir string, a, b *node) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir = e2eDir(t)
	return dir, newNode(t, dir, "alpha"), newNode(t, dir, "beta")
}

// sentWhileBetaDown pairs alpha and beta through their daemons, stops beta's daemon, and has
// alice send bob@beta a message (subject, body) that waits in alpha's outbox. It returns its id.
func sentWhileBetaDown(t *testing.T, a, b *node, subject, body string) string {
	t.Helper()
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	pinCards(t, a, b)
	b.stop()
	return a.send("alice", "bob@beta", subject, body)
}

// newNode initializes a host named name in a fresh home under dir; its daemon will listen on a
// free port of 127.0.0.1.
func newNode(t *testing.T, dir, name string) *node {
	t.Helper()
	return newNodeAt(t, dir, name, "127.0.0.1:0")
}

// newNodeAt initializes a host whose configured LAN address is listen; with a fixed port, its
// daemon and its pairing sessions listen there.
func newNodeAt(t *testing.T, dir, name, listen string) *node {
	t.Helper()
	n := &node{t: t, name: name, home: filepath.Join(dir, name)}
	if !strings.HasSuffix(listen, ":0") {
		n.addr = listen
	}
	n.must("init", "--host", name, "--listen", listen)
	t.Cleanup(func() {
		if n.d != nil {
			n.kill()
		}
		if t.Failed() {
			t.Logf("host %s home %s", n.name, n.home)
		}
	})
	return n
}

// result is what one command did.
type result struct {
	stdout, stderr string
	code           int
}

// runIn runs agentmbx with args against the node's home, stdin as standard input.
func (n *node) runIn(stdin string, args ...string) result {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eCmd)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentmbxPath(n.t), append(args, "--home", n.home)...)
	cmd.Env = childEnv("MBX_HOME=/nonexistent/must-use-flag")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		n.t.Fatalf("%s: agentmbx %s: %v", n.name, strings.Join(args, " "), err)
	}
	return result{out.String(), errb.String(), code}
}

func (n *node) run(args ...string) result {
	n.t.Helper()
	return n.runIn("", args...)
}

// must runs a command that has to succeed and returns its standard output.
func (n *node) must(args ...string) string {
	n.t.Helper()
	return n.mustIn("", args...)
}

func (n *node) mustIn(stdin string, args ...string) string {
	n.t.Helper()
	r := n.runIn(stdin, args...)
	if r.code != 0 {
		n.t.Fatalf("%s: agentmbx %s: exit %d\nstdout: %s\nstderr: %s", n.name, strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// mustJSON runs a command with --json and decodes its output into v.
func (n *node) mustJSON(v any, args ...string) {
	n.t.Helper()
	out := n.must(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		n.t.Fatalf("%s: agentmbx %s --json: %v\n%s", n.name, strings.Join(args, " "), err, out)
	}
}

// start runs the node's daemon and waits until it serves both its LAN address and its socket.
// A restarted daemon listens on the address it had before, so the peers' pins stay right.
func (n *node) start() {
	n.t.Helper()
	if n.d != nil {
		n.t.Fatalf("%s: daemon already running", n.name)
	}
	listen := "127.0.0.1:0"
	if n.addr != "" {
		listen = n.addr
	}
	addrFile := n.home + ".addr"
	os.Remove(addrFile)
	cmd := exec.Command(agentmbxPath(n.t), "daemon", "--home", n.home, "--listen", listen, "--tick", e2eTick, "--addr-file", addrFile)
	cmd.Args = append(cmd.Args, n.daemonArgs...)
	cmd.Env = childEnv()
	d := testkit.StartProc(n.t, cmd)
	n.d = d
	n.waitFor("the daemon to serve", func() (bool, string) {
		if ended, err := d.Exited(); ended {
			n.t.Fatalf("%s: daemon exited: %v\n%s", n.name, err, d.Log.String())
		}
		b, err := os.ReadFile(addrFile)
		if err != nil {
			return false, "no address file yet"
		}
		addr := strings.TrimSpace(string(b))
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" || port == "" {
			return false, fmt.Sprintf("address file holds %q", addr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, n.home)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		n.addr = addr
		return true, ""
	})
}

// stop sends SIGTERM and requires a clean exit.
func (n *node) stop() {
	n.t.Helper()
	d := n.d
	err := d.Stop(n.t)
	n.d = nil
	if err != nil {
		n.t.Fatalf("%s: daemon exited with %v after SIGTERM\n%s", n.name, err, d.Log.String())
	}
}

// kill sends SIGKILL: the daemon gets no chance to clean up.
func (n *node) kill() {
	n.t.Helper()
	d := n.d
	d.Cmd.Process.Kill()
	<-d.Done()
	n.d = nil
}

// waitFor polls cond until it holds, failing the test after e2eWait with cond's last word.
func (n *node) waitFor(what string, cond func() (bool, string)) {
	n.t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			logs := ""
			if n.d != nil {
				logs = n.d.Log.String()
			}
			n.t.Fatalf("%s: gave up waiting for %s: %s\ndaemon log:\n%s", n.name, what, last, logs)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// card returns the node's signed host card naming its daemon's address.
func (n *node) card() string {
	n.t.Helper()
	if n.addr == "" {
		n.t.Fatalf("%s: no address yet: start the daemon first", n.name)
	}
	return n.must("id", "--card", "--addr", n.addr)
}

// pinCards pins every node to every other by their cards (id --card | peers add - --yes).
func pinCards(t *testing.T, nodes ...*node) {
	t.Helper()
	for _, a := range nodes {
		card := a.card()
		for _, b := range nodes {
			if a == b {
				continue
			}
			out := b.mustIn(card, "peers", "add", "-", "--yes")
			if !strings.Contains(out, "pinned "+a.name+" ") {
				t.Fatalf("%s: peers add %s: %s", b.name, a.name, out)
			}
		}
	}
}

// send sends a message and returns its id.
func (n *node) send(from, to, subject, body string, extra ...string) string {
	n.t.Helper()
	out := n.must(append([]string{"send", "--as", from, "--to", to, "--subject", subject, "-m", body}, extra...)...)
	id := strings.TrimSpace(out)
	if len(id) != 26 {
		n.t.Fatalf("%s: send printed %q, want a message id", n.name, out)
	}
	return id
}

// inbox returns an agent's whole mailbox.
func (n *node) inbox(agent string) []api.Message {
	n.t.Helper()
	var msgs []api.Message
	n.mustJSON(&msgs, "inbox", "--as", agent, "--all", "--limit", "0")
	return msgs
}

// waitMail waits until agent has the message id and returns it; the mailbox must hold it once.
func (n *node) waitMail(agent, id string) api.Message {
	n.t.Helper()
	var got api.Message
	n.waitFor(fmt.Sprintf("message %s for %s", id, agent), func() (bool, string) {
		msgs := n.inbox(agent)
		count := 0
		for _, m := range msgs {
			if m.ID == id {
				got = m
				count++
			}
		}
		if count > 1 {
			n.t.Fatalf("%s: message %s shows %d times in %s's mailbox", n.name, id, count, agent)
		}
		return count == 1, fmt.Sprintf("%d messages, not it", len(msgs))
	})
	return got
}

// waitSent waits until every listed recipient of message id shows state (or a later one).
func (n *node) waitSent(id, state string, recipients ...string) api.Sent {
	n.t.Helper()
	rank := map[string]int{"queued": 0, "delivered": 1, "notified": 2, "read": 3, "acked": 4}
	var s api.Sent
	n.waitFor(fmt.Sprintf("%v of %s to be %s", recipients, id, state), func() (bool, string) {
		n.mustJSON(&s, "sent", id)
		for _, want := range recipients {
			found := false
			for _, r := range s.Recipients {
				if r.Recipient == want {
					found = true
					if rank[r.State] < rank[state] {
						return false, fmt.Sprintf("%s is %s", want, r.State)
					}
				}
			}
			if !found {
				return false, fmt.Sprintf("%s not listed in %+v", want, s.Recipients)
			}
		}
		return true, ""
	})
	return s
}

// outboxRows returns the outbox rows of message id.
func (n *node) outboxRows(id string) []api.OutboxRow {
	n.t.Helper()
	var rows, mine []api.OutboxRow
	n.mustJSON(&rows, "outbox", "--all", "--limit", "0")
	for _, r := range rows {
		if r.MsgID == id {
			mine = append(mine, r)
		}
	}
	return mine
}

func TestE2ETwoHosts(t *testing.T) {
	_, a, b := twoNodes(t)
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	checkModes(t, a.home)
	pinCards(t, a, b)

	// Commands go through the daemon; a second daemon on the same home is refused.
	if out := a.must("id"); !regexp.MustCompile(`(?m)^daemon: +running$`).MatchString(out) {
		t.Errorf("id with the daemon running says:\n%s", out)
	}
	if r := a.run("daemon", "--listen", "127.0.0.1:0"); r.code != 1 || !strings.Contains(r.stderr, "locked") {
		t.Errorf("a second daemon: exit %d, stderr %q; want 1 and locked", r.code, r.stderr)
	}

	var peers []api.Peer
	a.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Host != "beta" || peers[0].Addr != b.addr {
		t.Fatalf("alpha's peers = %+v, want beta at %s", peers, b.addr)
	}

	// alpha → beta, then the receipts of read and ack settle the sender's view. bob is already
	// waiting for it.
	waiting := b.background("inbox", "--as", "bob", "--wait", "80s", "--json")
	// Give the long poll a moment to park, so the send usually wakes it; if the send wins the
	// race, the poll finds the message unread at once, and the test holds either way.
	select {
	case <-waiting.done:
		t.Fatalf("inbox --wait ended early: %v\n%s\n%s", waiting.err, waiting.out.String(), waiting.errb.String())
	case <-time.After(300 * time.Millisecond):
	}
	id := a.send("alice", "bob@beta", "hello beta", "first message")
	if err := waiting.wait(t); err != nil {
		t.Fatalf("inbox --wait: %v\n%s", err, waiting.errb.String())
	}
	var woke []api.Message
	if err := json.Unmarshal([]byte(waiting.out.String()), &woke); err != nil || len(woke) != 1 || woke[0].ID != id {
		t.Fatalf("inbox --wait printed %s (%v), want message %s", waiting.out.String(), err, id)
	}
	m := b.waitMail("bob", id)
	if m.From != "alice@alpha" || m.Body != "first message" || m.Subject != "hello beta" {
		t.Fatalf("beta got %+v", m)
	}
	a.waitSent(id, "delivered", "bob@beta")
	if rows := a.outboxRows(id); len(rows) != 1 || rows[0].Host != "beta" {
		t.Fatalf("outbox rows of %s = %+v, want one for beta", id, rows)
	}
	b.must("read", id, "--as", "bob")
	b.must("ack", id, "--as", "bob", "--note", "got it")
	s := a.waitSent(id, "acked", "bob@beta")
	if r := s.Recipients[0]; r.Note != "got it" {
		t.Errorf("sent %s recipient = %+v, want the ack note", id, r)
	}
	a.waitFor("the outbox row to be done", func() (bool, string) {
		rows := a.outboxRows(id)
		return len(rows) == 1 && rows[0].State == "done", fmt.Sprintf("%+v", rows)
	})

	// beta → alpha: a reply.
	id2 := b.send("bob", "alice@alpha", "re: hello beta", "and back", "--reply-to", id)
	m2 := a.waitMail("alice", id2)
	if m2.From != "bob@beta" || m2.Body != "and back" || m2.ReplyTo != id {
		t.Fatalf("alpha got %+v", m2)
	}
	b.waitSent(id2, "delivered", "alice@alpha")

	// Both stop cleanly on SIGTERM; the store is then usable without a daemon.
	a.stop()
	b.stop()
	if _, err := os.Stat(client.SocketPath(a.home)); err == nil {
		t.Errorf("alpha's control socket is left after SIGTERM")
	}
	if msgs := a.inbox("alice"); len(msgs) != 1 || msgs[0].ID != id2 {
		t.Errorf("alpha's inbox without a daemon = %+v, want %s", msgs, id2)
	}
}

func TestE2EThreeHostsFanOut(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	a, b, c := newNode(t, dir, "alpha"), newNode(t, dir, "beta"), newNode(t, dir, "gamma")
	a.must("agents", "add", "alice")
	a.must("agents", "add", "arev", "--role", "reviewer")
	b.must("agents", "add", "bob")
	b.must("agents", "add", "brev", "--role", "reviewer")
	c.must("agents", "add", "carl")
	c.must("agents", "add", "crev", "--role", "reviewer")
	for _, n := range []*node{a, b, c} {
		n.start()
	}
	pinCards(t, a, b, c)

	// Role mail: every reviewer here and on each peer; one outbox row per remote host.
	id := a.send("alice", "role:reviewer", "please review", "diff attached")
	for _, x := range []struct {
		n     *node
		agent string
	}{{a, "arev"}, {b, "brev"}, {c, "crev"}} {
		x.n.waitMail(x.agent, id)
	}
	for _, x := range []struct {
		n     *node
		agent string
	}{{b, "bob"}, {c, "carl"}} {
		for _, m := range x.n.inbox(x.agent) {
			if m.ID == id {
				t.Errorf("%s: %s got role mail for reviewers", x.n.name, x.agent)
			}
		}
	}
	rows := a.outboxRows(id)
	hosts := map[string]int{}
	for _, r := range rows {
		hosts[r.Host]++
	}
	if len(rows) != 2 || hosts["beta"] != 1 || hosts["gamma"] != 1 {
		t.Fatalf("outbox rows of role mail = %+v, want one for beta and one for gamma", rows)
	}
	a.waitSent(id, "delivered", "brev@beta", "crev@gamma")

	// Broadcast from beta: every agent of every host.
	id2 := b.send("bob", "*", "all hands", "meeting at noon")
	for _, x := range []struct {
		n     *node
		agent string
	}{{a, "alice"}, {a, "arev"}, {b, "brev"}, {c, "carl"}, {c, "crev"}} {
		x.n.waitMail(x.agent, id2)
	}
	b.waitSent(id2, "delivered", "alice@alpha", "arev@alpha", "carl@gamma", "crev@gamma")

	// A reader on gamma acks; beta sees it.
	c.must("ack", id2, "--as", "carl", "--note", "ok")
	b.waitSent(id2, "acked", "carl@gamma")

	for _, n := range []*node{a, b, c} {
		n.stop()
	}
}

// TestE2ECrashAfterSend kills the sender's daemon right after it answered a send while the
// recipient is down: the row is on disk, and after both come back the message arrives, once.
func TestE2ECrashAfterSend(t *testing.T) {
	_, a, b := twoNodes(t)
	id := sentWhileBetaDown(t, a, b, "while you were out", "kept through a crash")
	a.kill()

	// Without a daemon the command opens the store: the row is there, not done.
	rows := a.outboxRows(id)
	if len(rows) != 1 || rows[0].Host != "beta" || rows[0].State == "done" {
		t.Fatalf("outbox after SIGKILL = %+v, want the row for beta still to deliver", rows)
	}

	b.start()
	a.start()
	m := b.waitMail("bob", id)
	if m.Body != "kept through a crash" {
		t.Fatalf("beta got %+v", m)
	}
	a.waitSent(id, "delivered", "bob@beta")
	a.waitFor("the outbox row to be done", func() (bool, string) {
		rows := a.outboxRows(id)
		return len(rows) == 1 && rows[0].State == "done", fmt.Sprintf("%+v", rows)
	})
	// Once more after everything settled: still exactly one copy.
	b.waitMail("bob", id)
	a.stop()
	b.stop()
}

// checkModes checks that a home and its secrets are the owner's alone.
func checkModes(t *testing.T, home string) {
	t.Helper()
	for _, f := range []struct {
		name string
		want os.FileMode
	}{{"", 0o700}, {"host.key", 0o600}, {"enc.key", 0o600}, {"state.db", 0o600}, {"agentmbx.sock", 0o600}} {
		fi, err := os.Stat(filepath.Join(home, f.name))
		if err != nil {
			t.Errorf("stat %s: %v", f.name, err)
			continue
		}
		if got := fi.Mode().Perm(); got != f.want {
			t.Errorf("mode of %s/%s = %o, want %o", home, f.name, got, f.want)
		}
	}
}

// TestE2EPairThroughDaemons pairs two hosts whose daemons run: the commands ask the daemons to
// run the session. An expired token pins nothing.
func TestE2EPairThroughDaemons(t *testing.T) {
	_, a, b := twoNodes(t)
	a.start()
	b.start()

	// A token that expires before anyone joins: pair gives up, and the token is refused.
	p := a.background("pair", "--yes", "--ttl", "1s")
	if err := p.wait(t); err == nil {
		t.Fatalf("pair with an expired token succeeded\n%s", p.out.String())
	}
	if strings.Contains(p.errb.String(), "does not pair over its control socket") {
		t.Fatalf("the daemon's control socket does not serve pairing (the daemon must pass its PairingService to control.NewHandler): %s", p.errb.String())
	}
	if !strings.Contains(p.errb.String(), "expired") {
		t.Fatalf("pair with a 1s token: stderr %q, want it to say expired", p.errb.String())
	}
	m := regexp.MustCompile(`(?m)^  agentmbx join (\S+) (\S+)$`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("pair printed no join line:\n%s", p.out.String())
	}
	if r := b.run("join", m[1], m[2], "--yes"); r.code == 0 {
		t.Fatalf("join with an expired token succeeded: %s", r.stdout)
	}
	var peers []api.Peer
	for _, n := range []*node{a, b} {
		if n.mustJSON(&peers, "peers"); len(peers) != 0 {
			t.Fatalf("%s pinned %+v after an expired token", n.name, peers)
		}
	}

	p = a.background("pair", "--yes")
	m = p.waitLine(t, `^  agentmbx join (\S+) (\S+)$`)
	if m[1] != a.addr {
		t.Fatalf("pair says to join %s, want the daemon's %s", m[1], a.addr)
	}
	out := b.must("join", m[1], m[2], "--yes")
	joinCode := regexp.MustCompile(`(?m)^code: (\d{6})$`).FindStringSubmatch(out)
	pairCode := p.waitLine(t, `^code: (\d{6})$`)
	if err := p.wait(t); err != nil {
		t.Fatalf("pair: %v\n%s", err, p.errb.String())
	}
	if joinCode == nil || joinCode[1] != pairCode[1] {
		t.Fatalf("codes differ: pair shows %s, join printed %q", pairCode[1], out)
	}
	a.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Host != "beta" || peers[0].Addr != b.addr {
		t.Fatalf("alpha's peers = %+v, want beta at %s", peers, b.addr)
	}
	b.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Host != "alpha" || peers[0].Addr != a.addr {
		t.Fatalf("beta's peers = %+v, want alpha at %s", peers, a.addr)
	}
	b.must("agents", "add", "bob")
	id := a.send("alice", "bob@beta", "paired live", "no restart needed")
	b.waitMail("bob", id)
	a.stop()
	b.stop()
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// bg is a command running in the background whose output lines the test reads as they come.
type bg struct {
	cmd   *exec.Cmd
	lines chan string
	out   *testkit.SyncBuffer
	errb  *testkit.SyncBuffer
	done  chan struct{}
	err   error
}

func (n *node) background(args ...string) *bg {
	n.t.Helper()
	b := &bg{lines: make(chan string, 100), out: &testkit.SyncBuffer{}, errb: &testkit.SyncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(agentmbxPath(n.t), append(args, "--home", n.home)...)
	b.cmd.Env = childEnv()
	b.cmd.Stderr = b.errb
	pipe, err := b.cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			b.out.Write([]byte(sc.Text() + "\n"))
			b.lines <- sc.Text()
		}
		close(b.lines)
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	n.t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// waitLine returns the first line matching re (its submatches), failing when the command ends
// or e2eWait passes first.
func (b *bg) waitLine(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(e2eWait)
	for {
		select {
		case line, ok := <-b.lines:
			if !ok {
				<-b.done
				t.Fatalf("%v ended (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", b.cmd.Args, b.err, re, b.out.String(), b.errb.String())
			}
			if m := rx.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("%v did not print %q\nstdout:\n%s\nstderr:\n%s", b.cmd.Args, re, b.out.String(), b.errb.String())
		}
	}
}

// wait waits for the command to end and returns its exit error.
func (b *bg) wait(t *testing.T) error {
	t.Helper()
	go func() {
		for range b.lines {
		}
	}()
	select {
	case <-b.done:
		return b.err
	case <-time.After(e2eWait):
		t.Fatalf("%v did not end\nstdout:\n%s\nstderr:\n%s", b.cmd.Args, b.out.String(), b.errb.String())
		return nil
	}
}

// TestE2EPairJoin pairs two hosts with pair and join (no daemons: pair serves the LAN itself),
// then runs their daemons and sends mail both ways.
func TestE2EPairJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	a := newNodeAt(t, dir, "alpha", freePort(t))
	b := newNodeAt(t, dir, "beta", freePort(t))

	// Without a terminal and without --yes, both fail at once: nothing waits on stdin.
	for _, args := range [][]string{{"pair"}, {"join", a.addr, "ABCD-EFGH-JKMN"}} {
		r := a.run(args...)
		if r.code != 1 || !strings.Contains(r.stderr, "not a terminal") || !strings.Contains(r.stderr, "hint: ") {
			t.Fatalf("%v without a terminal: exit %d, stderr %q; want 1 with a hint", args, r.code, r.stderr)
		}
	}

	p := a.background("pair", "--yes", "--ttl", "5m")
	m := p.waitLine(t, `^  agentmbx join (\S+) (\S+)$`)
	addr, token := m[1], m[2]
	if addr != a.addr {
		t.Fatalf("pair says to join %s, want %s", addr, a.addr)
	}

	// A wrong token pins nothing, and the session keeps waiting for the right one.
	if r := b.run("join", addr, "ZZZZ-ZZZZ-ZZZZ", "--yes"); r.code == 0 {
		t.Fatalf("join with a wrong token succeeded: %s", r.stdout)
	}
	var peers []api.Peer
	b.mustJSON(&peers, "peers")
	if len(peers) != 0 {
		t.Fatalf("beta pinned %+v after a wrong token", peers)
	}

	out := b.must("join", addr, token, "--yes")
	joinCode := regexp.MustCompile(`(?m)^code: (\d{6})$`).FindStringSubmatch(out)
	if joinCode == nil || !strings.Contains(out, "pinned alpha (") {
		t.Fatalf("join printed %q, want the code and the pin", out)
	}
	pairCode := p.waitLine(t, `^code: (\d{6})$`)
	p.waitLine(t, `^pinned beta \(`)
	if err := p.wait(t); err != nil {
		t.Fatalf("pair: %v\n%s", err, p.errb.String())
	}
	if pairCode[1] != joinCode[1] {
		t.Fatalf("codes differ: pair shows %s, join %s", pairCode[1], joinCode[1])
	}

	a.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Host != "beta" || peers[0].Addr != b.addr {
		t.Fatalf("alpha's peers = %+v, want beta at %s", peers, b.addr)
	}
	b.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Host != "alpha" || peers[0].Addr != a.addr {
		t.Fatalf("beta's peers = %+v, want alpha at %s", peers, a.addr)
	}

	// The token worked once.
	if r := b.run("join", addr, token, "--yes"); r.code == 0 {
		t.Fatalf("a second join with the same token succeeded")
	}

	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	id := a.send("alice", "bob@beta", "paired", "over the LAN")
	b.waitMail("bob", id)
	id2 := b.send("bob", "alice@alpha", "re: paired", "and back")
	a.waitMail("alice", id2)
	a.waitSent(id, "delivered", "bob@beta")
	b.waitSent(id2, "delivered", "alice@alpha")
	a.stop()
	b.stop()
}
