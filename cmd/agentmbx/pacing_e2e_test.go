package main

// Push pacing and recovery with real processes: a relay (`agentmbx relay serve`, metrics on a
// private listener) and host daemons as child processes.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayserver"
)

// startRelayWithMetrics is startRelayProc with Prometheus metrics on a second loopback listener;
// it returns the relay and the metrics address.
func startRelayWithMetrics(t *testing.T, dir string, args ...string) (*relayProc, string) {
	t.Helper()
	mfile := dir + ".metrics"
	r := startRelay(t, dir+".addr", []string{relayserver.EnvRelayKey + "="}, append([]string{"--store-dir", dir, "--listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--metrics-addr-file", mfile}, args...)...)
	r.dir = dir
	return r, r.p.WaitAddr(t, mfile)
}

// relayMetric sums the samples of the metric name whose labels contain every one of labels
// (`code="rate"`).
func relayMetric(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// relayOnlyHosts starts a relay and the named hosts pinned to each other without LAN addresses
// and to the relay, each enrolled with its n-1 senders published. Every host gets the agent
// named first in agents (alpha: alice, beta: bob, gamma: carol).
func relayOnlyHosts(t *testing.T, dir string, relayURL string, names ...string) []*node {
	t.Helper()
	agents := map[string]string{"alpha": "alice", "beta": "bob", "gamma": "carol"}
	var nodes []*node
	for _, name := range names {
		n := newNode(t, dir, name)
		n.must("agents", "add", agents[name])
		nodes = append(nodes, n)
	}
	pinWithoutLAN(t, nodes...)
	for _, n := range nodes {
		n.must("relay", "set", relayURL)
		n.start()
	}
	for _, n := range nodes {
		n.waitFor("enrolment at the relay", func() (bool, string) {
			st := n.relayStatus()
			return st.Enrolled && st.Senders == len(nodes)-1 && st.EncAdExp != "" && st.Daemon, fmt.Sprintf("%+v", st)
		})
	}
	return nodes
}

// outboxSettled reports whether every envelope row of n is done, and how many rows there are.
func outboxSettled(n *node) (bool, int, []api.OutboxRow) {
	var rows []api.OutboxRow
	n.mustJSON(&rows, "outbox", "--all", "--limit", "0")
	var env []api.OutboxRow
	for _, r := range rows {
		if r.Kind == "envelope" {
			env = append(env, r)
		}
	}
	for _, r := range env {
		if r.State != "done" {
			return false, len(env), env
		}
	}
	return true, len(env), env
}

// slowDowns counts the relay pauses a daemon logged (one per request the relay refused for the
// link: rejected:rate, 429, 503 with Retry-After).
func slowDowns(n *node) int {
	if n.d == nil {
		return 0
	}
	return strings.Count(n.d.Log.String(), "relay asks to slow down")
}

// TestE2EPushPacingBurstAndStall: alpha sends 1,000 messages in a burst, each to two relay-only
// peers (2,000 outbox rows), through a real relay with the 0.5.x push limit (120 requests a
// minute per sender); a third of the way in, the relay process is stopped (SIGSTOP) for 6 s and
// continued. Every message settles (delivered and receipted), with only a few rate refusals at
// most and no row's backoff grown by them. The counts and the settle time are logged, not
// asserted. Cost: about a minute (1,000 sends over the control socket, 2,000 sealed rows).
func TestE2EPushPacingBurstAndStall(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	const messages = 1000
	dir := e2eDir(t)
	relay, metrics := startRelayWithMetrics(t, filepath.Join(dir, "relay"))
	nodes := relayOnlyHosts(t, dir, "http://"+relay.addr, "alpha", "beta", "gamma")
	a, b, g := nodes[0], nodes[1], nodes[2]
	pushesBefore := relayMetric(t, metrics, "agentmbx_relay_requests_total", `route="POST /v2/relay/items"`)

	ctx := context.Background()
	c, err := client.Dial(ctx, a.home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stopped := make(chan struct{})
	var once sync.Once
	cont := func() { _ = relay.p.Cmd.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(cont)
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < messages; i += 4 {
				_, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta", "carol@gamma"},
					Subject: fmt.Sprintf("burst %d", i), Body: fmt.Sprintf("message %d of the burst", i)})
				if err != nil {
					errs <- fmt.Errorf("send %d: %w", i, err)
					return
				}
				if sent.Add(1) == messages/3 {
					once.Do(func() { close(stopped) })
				}
			}
		}()
	}
	<-stopped
	if err := relay.p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stallAt := sent.Load()
	time.Sleep(6 * time.Second)
	cont()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lastSend := time.Now()
	t.Logf("pacing: %d messages sent in %v (relay stopped for 6 s after %d)", messages, lastSend.Sub(start).Round(time.Millisecond), stallAt)

	deadline := time.Now().Add(10 * time.Minute) // generous: the machine is shared
	var rows []api.OutboxRow
	for {
		ok, n, env := outboxSettled(a)
		if ok && n == 2*messages {
			rows = env
			break
		}
		if time.Now().After(deadline) {
			done := 0
			for _, r := range env {
				if r.State == "done" {
					done++
				}
			}
			t.Fatalf("not settled after 10 minutes: %d of %d envelope rows done\nalpha log:\n%s", done, n, tail(a.d.Log.String(), 4000))
		}
		time.Sleep(time.Second)
	}
	settle := time.Since(lastSend)
	for _, n := range []*node{b, g} {
		agent := map[string]string{"beta": "bob", "gamma": "carol"}[n.name]
		if got := len(n.inbox(agent)); got != messages {
			t.Fatalf("%s has %d messages, want %d", agent, got, messages)
		}
	}
	pushes := relayMetric(t, metrics, "agentmbx_relay_requests_total", `route="POST /v2/relay/items"`) - pushesBefore
	rated := relayMetric(t, metrics, "agentmbx_relay_items_total", `code="rate"`)
	refusals := slowDowns(a) + slowDowns(b) + slowDowns(g)
	most := 0
	for _, r := range rows {
		most = max(most, r.Attempts)
		if strings.Contains(r.LastError, "rate") {
			t.Errorf("row %s→%s kept a rate error: %q", r.MsgID, r.Host, r.LastError)
		}
	}
	t.Logf("pacing: settled %v after the last send; %d push requests (all hosts, receipts included) for %d envelope rows; %d items refused rejected:rate in %d refused requests; most attempts of a row %d",
		settle.Round(time.Millisecond), int(pushes), 2*messages, int(rated), refusals, most)
	// A few refusals at most (a relay bucket spent by a previous run, a clock step), never a storm.
	if refusals > 3 {
		t.Errorf("%d push requests refused for the link, want at most a few", refusals)
	}
	// A rate refusal leaves a row's attempts alone: every row went through on its first attempt,
	// but for a push that got no answer during the stall.
	if most > 2 {
		t.Errorf("a row took %d attempts: its backoff grew", most)
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// pushIntoLongBackoff records failed attempts on every pending row of the stopped host in home,
// through the outbox's own MarkAttemptFailed, until each has made at least attempts: what an
// outage of hours leaves behind (the backoff doubles from 5 s to its cap of an hour), without the
// hours. The attempts go over the transport via names for the row's host.
func pushIntoLongBackoff(t *testing.T, home string, attempts int, via func(host string) outbox.Transport) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(home, host.StateFile), 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := outbox.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows, err := ob.List(ctx, outbox.Filter{Active: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.State != outbox.StatePending {
			continue
		}
		tr := via(r.Host)
		for n := r.Attempts; n < attempts; n++ {
			if _, err := ob.MarkAttemptFailed(ctx, r.Key(), tr, errors.New("the outage went on (recorded by the test)")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestE2ERecoveryAfterLongOutage: the relay and a LAN peer are down while alpha sends to a
// relay-only peer (beta) and to the LAN peer (gamma); the outage goes on until every row waits
// in a backoff of over half an hour (10 failed attempts: 5 s·2^9 = 43 min ±20%). When the relay
// and gamma come back, every waiting row is delivered well before its own next_at: the relay's
// rows when a pull succeeds, gamma's when a probe of its LAN address finds it (flush on recovery).
// The time from their return to the last delivery is logged, not asserted. Cost: about 45 s
// (30 s of it the outage going on with alpha running).
func TestE2ERecoveryAfterLongOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	const each = 10
	dir := e2eDir(t)
	relay := startRelayProc(t, filepath.Join(dir, "relay"), "127.0.0.1:0")
	url := "http://" + relay.addr
	a, b, g := newNode(t, dir, "alpha"), newNode(t, dir, "beta"), newNode(t, dir, "gamma")
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	g.must("agents", "add", "carol")
	a.start()
	g.start()
	pinCards(t, a, g)
	pinWithoutLAN(t, a, b)
	for _, n := range []*node{a, b, g} {
		n.must("relay", "set", url)
	}
	b.start()
	for _, n := range []*node{a, b} {
		n.waitFor("enrolment at the relay", func() (bool, string) {
			st := n.relayStatus()
			return st.Enrolled && st.EncAdExp != "" && st.Daemon, fmt.Sprintf("%+v", st)
		})
	}

	relay.stop()
	g.stop()
	var ids []string
	for i := range each {
		ids = append(ids, a.send("alice", "bob@beta", fmt.Sprintf("relay %d", i), "waits for the relay"))
		ids = append(ids, a.send("alice", "carol@gamma", fmt.Sprintf("lan %d", i), "waits for gamma"))
	}
	a.waitFor("a failed attempt on every row", func() (bool, string) {
		_, _, env := outboxSettled(a)
		for _, r := range env {
			if r.Attempts == 0 {
				return false, fmt.Sprintf("%+v", r)
			}
		}
		return len(env) == 2*each, fmt.Sprintf("%d rows", len(env))
	})
	a.stop()
	// beta's rows wait for the relay, gamma's for its LAN address (never the relay: only a probe
	// of gamma's address can notice its return).
	pushIntoLongBackoff(t, a.home, 10, func(host string) outbox.Transport {
		if host == "beta" {
			return outbox.TransportRelay
		}
		return outbox.TransportLAN
	})
	a.start()
	_, _, env := outboxSettled(a)
	soonest := time.Time{}
	for _, r := range env {
		at, err := time.Parse(time.RFC3339Nano, r.NextAt)
		if err != nil || r.State != "pending" {
			t.Fatalf("row %+v: want pending with a next_at (%v)", r, err)
		}
		if soonest.IsZero() || at.Before(soonest) {
			soonest = at
		}
	}
	if wait := time.Until(soonest); wait < 25*time.Minute {
		t.Fatalf("the soonest row is due in %v; want every row in a backoff of over half an hour", wait)
	}
	// The outage goes on with alpha running, so that its pull loop backs off to its cap.
	time.Sleep(30 * time.Second)

	back := time.Now()
	startRelayProc(t, relay.dir, relay.addr) // the same relay back; its cleanup stops it
	g.start()
	// Generous, and still far from the rows' own next_at (over 25 minutes away).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		ok, n, env := outboxSettled(a)
		if ok && n == 2*each {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered 5 minutes after the relay and gamma came back: %+v\nalpha log:\n%s", env, tail(a.d.Log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("recovery: all %d waiting rows delivered and receipted %v after the relay and gamma came back (their own backoff had them due in %v or later)",
		2*each, time.Since(back).Round(time.Millisecond), soonest.Sub(back).Round(time.Second))
	for _, id := range ids {
		if rows := a.outboxRows(id); len(rows) != 1 || rows[0].State != "done" {
			t.Fatalf("message %s: %+v", id, rows)
		}
	}
	if got := len(b.inbox("bob")); got != each {
		t.Fatalf("bob has %d messages, want %d", got, each)
	}
	if got := len(g.inbox("carol")); got != each {
		t.Fatalf("carol has %d messages, want %d", got, each)
	}
}
