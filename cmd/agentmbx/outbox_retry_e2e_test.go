package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// TestE2EOutboxRetry: a row in backoff for a stopped peer is made due now through the daemon
// (`outbox retry ID`, then `--all` once the peer is back) and delivered; bad calls are usage
// errors (exit 2), a message with nothing to retry is exit 1; without a daemon the command works
// on the store and says that the rows leave when the daemon starts. Cost: two daemons, ~10 s.
func TestE2EOutboxRetry(t *testing.T) {
	_, a, b := twoNodes(t)
	id := sentWhileBetaDown(t, a, b, "retry me", "after the outage")
	attempts := func(min int) func() (bool, string) {
		return func() (bool, string) {
			rows := a.outboxRows(id)
			return len(rows) == 1 && rows[0].State == "pending" && rows[0].Attempts >= min, fmt.Sprintf("%+v", rows)
		}
	}
	// Two failed attempts: the row now waits 8–12 s.
	a.waitFor("two failed attempts", attempts(2))
	// The outbox says why it waits: the peer's LAN address gives no answer, since when; the
	// table shows it whole.
	if w := a.outboxRows(id)[0].Waiting; !strings.HasPrefix(w, "beta unreachable on the LAN (127.0.0.1:") || !strings.Contains(w, ") since 20") ||
		!strings.Contains(w, "no relay is set to go around it; next attempt at ") {
		t.Fatalf("waiting = %q", w)
	}
	if out := a.must("outbox"); !regexp.MustCompile(`(?m)^` + id[:shortIDMin] + `\tenvelope\tbeta\tpending\tlan\t\d+\t[^\t]+\tbeta unreachable on the LAN .*; next attempt at \S+$`).MatchString(out) {
		t.Fatalf("outbox table:\n%s", out)
	}
	if out := a.must("outbox", "retry", id); !strings.HasPrefix(out, "1 row due now\n") {
		t.Fatalf("outbox retry %s = %q, want 1 row made due", id, out)
	}
	a.waitFor("a third attempt", attempts(3))

	for _, args := range [][]string{{"outbox", "retry"}, {"outbox", "retry", "--all", id}} {
		if r := a.run(args...); r.code != 2 || !strings.Contains(r.stderr, "name message ids or --all") {
			t.Fatalf("agentmbx %v: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	if r := a.run("outbox", "retry", "01JZZZZZZZZZZZZZZZZZZZZZZZ"); r.code != 1 || !strings.Contains(r.stderr, "no outbox row waiting") {
		t.Fatalf("retry of an unknown message: exit %d, stderr %q", r.code, r.stderr)
	}

	b.start()
	var res struct {
		Due     int `json:"due"`
		Already int `json:"already_due"`
	}
	a.mustJSON(&res, "outbox", "retry", "--all")
	// The daemon may have found beta back on its own (its probe of silent peers) and sent the
	// row before the retry: then there is nothing left to make due, and the row is no longer
	// pending. Otherwise the retry names exactly the one row.
	if n := res.Due + res.Already; n > 1 || n == 0 && stillPending(a, id) {
		t.Fatalf("outbox retry --all = %+v, want the one row (rows %+v)", res, a.outboxRows(id))
	}
	b.waitMail("bob", id)
	a.waitSent(id, "delivered", "bob@beta")
	a.waitFor("the row to be done", func() (bool, string) {
		rows := a.outboxRows(id)
		return len(rows) == 1 && rows[0].State == "done", fmt.Sprintf("%+v", rows)
	})
	if r := a.run("outbox", "retry", id); r.code != 1 {
		t.Fatalf("retry of a delivered message: exit %d, want 1\n%s", r.code, r.stderr)
	}
	// Listing through the daemon: the finished row is hidden unless asked for.
	if r := a.run("outbox"); r.code != 0 || r.stdout != "nothing waiting in the outbox; 1 finished row (--all lists them)\n" {
		t.Fatalf("outbox through the daemon: exit %d, %q", r.code, r.stdout)
	}
	var done []api.OutboxRow
	a.mustJSON(&done, "outbox", "--state", "done", "--limit", "5")
	if len(done) != 1 || done[0].MsgID != id || done[0].Waiting != "" {
		t.Fatalf("outbox --state done through the daemon = %+v", done)
	}

	// Without a daemon: the store directly; a new row is due already and waits for the daemon.
	a.stop()
	id2 := a.send("alice", "bob@beta", "queued", "no daemon")
	r := a.run("outbox", "retry", id2)
	if r.code != 0 || r.stdout != "0 rows due now (1 was due already)\n" || !strings.Contains(r.stderr, "leave when `agentmbx daemon` starts") {
		t.Fatalf("retry without a daemon: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	b.stop()
}

// stillPending reports whether the outbox of n has message id's one row pending.
func stillPending(n *node, id string) bool {
	rows := n.outboxRows(id)
	return len(rows) == 1 && rows[0].State == "pending"
}
