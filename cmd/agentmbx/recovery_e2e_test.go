package main

// Recovery after a relay outage, and the first send after a daemon start, with real processes:
// a relay (`agentmbx relay serve`) and two relay-only host daemons as child processes, on the
// daemon's default tick. The figures are logged (go test -v), never asserted; see
// docs/performance.md ("Recovery after a relay outage") for how to take them again:
//
//	MBX_BENCH_RECOVERY=20s,100s go test -v -count=1 -run 'TestE2ERelayOutageRecovery$' ./cmd/agentmbx
//	MBX_BENCH_FIRST_SEND=10 go test -v -count=1 -run 'TestE2EFirstSendAfterStart$' ./cmd/agentmbx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// relayOnlyPair starts a relay and the daemons of alpha (alice) and beta (bob), pinned to each
// other without LAN addresses and enrolled at the relay, on the default tick (5 s).
func relayOnlyPair(t *testing.T) (relay *relayProc, a, b *node) {
	t.Helper()
	dir := e2eDir(t)
	relay = startRelayProc(t, filepath.Join(dir, "relay"), "127.0.0.1:0")
	a, b = newNode(t, dir, "alpha"), newNode(t, dir, "beta")
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	pinWithoutLAN(t, a, b)
	for _, n := range []*node{a, b} {
		n.must("relay", "set", "http://"+relay.addr)
		n.daemonArgs = []string{"--tick", "5s"} // the default, over the tests' short one
		if os.Getenv("MBX_RECOVERY_DEBUG") != "" {
			n.daemonArgs = append(n.daemonArgs, "--log-level", "debug")
		}
		n.start()
	}
	for _, n := range []*node{a, b} {
		n.waitFor("enrolment at the relay", func() (bool, string) {
			st := n.relayStatus()
			return st.Enrolled && st.Senders == 1 && st.EncAdExp != "" && st.Daemon, fmt.Sprintf("%+v", st)
		})
	}
	return relay, a, b
}

// daemonStatus is `daemon status --json`.
func (n *node) daemonStatus() api.DaemonStatus {
	n.t.Helper()
	var st api.DaemonStatus
	n.mustJSON(&st, "daemon", "status", "--json")
	return st
}

// reachOf is the daemon's state of target ("unknown" when it names none).
func reachOf(st api.DaemonStatus, target string) string {
	for _, r := range st.Reach {
		if r.Target == target {
			return r.State
		}
	}
	return "unknown"
}

// arrivals polls agent's mailbox on n over the control socket until it holds every id of want,
// and returns when the last of them was first seen. A copy seen twice fails the test.
func (n *node) arrivals(agent string, want []string, limit time.Duration) time.Time {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := client.Dial(ctx, n.home)
	if err != nil {
		n.t.Fatalf("%s: dial: %v", n.name, err)
	}
	defer c.Close()
	var last time.Time
	for {
		msgs, err := c.Inbox(ctx, agent, true)
		now := time.Now()
		if err != nil {
			n.t.Fatalf("%s: inbox of %s: %v (%d of %d arrived)", n.name, agent, err, len(msgs), len(want))
		}
		seen := map[string]int{}
		for _, m := range msgs {
			seen[m.ID]++
			if m.Deliveries > 1 || seen[m.ID] > 1 {
				n.t.Fatalf("%s: message %s delivered more than once: %+v", n.name, m.ID, m)
			}
		}
		missing := 0
		for _, id := range want {
			if seen[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			if last.IsZero() {
				last = now
			}
			return last
		}
		time.Sleep(50 * time.Millisecond) // polls the mailbox: the daemons deliver on their own
	}
}

// TestE2ERelayOutageRecovery: the relay process stops while both hosts send to each other (10
// messages each way); once both daemons count the relay down, the relay restarts on the same
// address and store. Every message is delivered exactly once after the return, and each daemon
// logs the one line of its recovery ("relay reachable again after …; sending N rows"), which the
// reachability tracker writes when a probe (a pull brought forward) finds the relay back and
// makes every row waiting for it due. With MBX_BENCH_RECOVERY=20s,100s the outage is held that
// long (from the stop) and the seconds from the relay's return to the last delivery are logged.
// Cost: about 15 s (the outage lasts until both daemons have seen it).
func TestE2ERelayOutageRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	outages := []time.Duration{0} // 0: until both daemons count the relay down
	if s := os.Getenv("MBX_BENCH_RECOVERY"); s != "" {
		outages = nil
		for _, f := range strings.Split(s, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("MBX_BENCH_RECOVERY: %v", err)
			}
			outages = append(outages, d)
		}
	}
	const each = 10
	relay, a, b := relayOnlyPair(t)
	for round, outage := range outages {
		relay.stop()
		stopped := time.Now()
		var toBob, toAlice []string
		for i := range each {
			toBob = append(toBob, a.send("alice", "bob@beta", fmt.Sprintf("round %d: %d", round, i), "sent while the relay is away"))
			toAlice = append(toAlice, b.send("bob", "alice@alpha", fmt.Sprintf("round %d: %d", round, i), "sent while the relay is away"))
		}
		for _, n := range []*node{a, b} {
			n.waitFor("the relay counted down", func() (bool, string) {
				st := n.daemonStatus()
				return reachOf(st, "relay") == "down", fmt.Sprintf("%+v", st.Reach)
			})
		}
		if rest := outage - time.Since(stopped); rest > 0 {
			time.Sleep(rest) // the outage itself (bench mode): nothing to wait on but time
		}
		linesBefore := [2]int{strings.Count(a.d.Log.String(), "relay reachable again after"),
			strings.Count(b.d.Log.String(), "relay reachable again after")}
		back := time.Now()
		relay = startRelayProc(t, relay.dir, relay.addr)
		lastBob := b.arrivals("bob", toBob, 5*time.Minute)
		lastAlice := a.arrivals("alice", toAlice, 5*time.Minute)
		last := lastBob
		if lastAlice.After(last) {
			last = lastAlice
		}
		t.Logf("relay outage %v (held %v): %d messages each way; last delivered %.1f s after the relay's return",
			outage, back.Sub(stopped).Round(100*time.Millisecond), each, last.Sub(back).Seconds())
		for i, n := range []*node{a, b} {
			log := n.d.Log.String()
			if strings.Count(log, "relay reachable again after") <= linesBefore[i] {
				t.Fatalf("%s did not log its recovery:\n%s", n.name, tail(log, 3000))
			}
			i := strings.LastIndex(log, "relay reachable again after")
			line, _, _ := strings.Cut(log[i:], "\n")
			t.Logf("%s: %s", n.name, line)
			if os.Getenv("MBX_RECOVERY_DEBUG") != "" {
				t.Logf("%s log:\n%s", n.name, tail(log, 20000))
			}
		}
		for _, n := range []*node{a, b} {
			n.waitFor("every row settled", func() (bool, string) {
				ok, _, env := outboxSettled(n)
				return ok, fmt.Sprintf("%+v", env)
			})
		}
	}
}

// TestE2EFirstSendAfterStart measures the first send after a daemon start: alpha's daemon starts,
// alice sends one message to bob (relay only), and the time from the start of the send to the
// message in bob's mailbox is taken; MBX_BENCH_FIRST_SEND=N samples (default 3) and logs the
// median. Nothing is asserted on the time; every message must arrive once.
func TestE2EFirstSendAfterStart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	samples := 3
	if s := os.Getenv("MBX_BENCH_FIRST_SEND"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MBX_BENCH_FIRST_SEND=%q: want a count", s)
		}
		samples = n
	}
	_, a, b := relayOnlyPair(t)
	var took []time.Duration
	for i := range samples {
		a.stop()
		a.start()
		start := time.Now()
		id := a.send("alice", "bob@beta", fmt.Sprintf("first after start %d", i), "how long")
		last := b.arrivals("bob", []string{id}, 2*time.Minute)
		took = append(took, last.Sub(start))
	}
	slices.Sort(took)
	t.Logf("first send after a daemon start, %d samples: median %v, min %v, max %v (all %v)", samples,
		took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took)
}
