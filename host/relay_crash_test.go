package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// SIGKILL crash drills of the relay paths (docs/design.md: Crash windows). The relay runs in this
// test process (relayserver over sqlitestore); the host under test runs as a child — this test
// binary re-run as TestRelayCrashChildProcess — doing one outbox pass or one receive, with
// MBX_FAILPOINT killing it at a named point. The parent then reopens the host's store and checks
// what survived.

const (
	relayCrashChildEnv = "HOST_RELAY_CRASH_CHILD" // the child's action: pass or pull
	relayCrashHomeEnv  = "HOST_RELAY_CRASH_HOME"
)

// TestRelayCrashChildProcess is the child of the relay crash drills; it does nothing in a normal
// test run. A child that gets past its work without being killed exits 3.
func TestRelayCrashChildProcess(t *testing.T) {
	action := os.Getenv(relayCrashChildEnv)
	if action == "" {
		t.Skip("run as a child by the relay crash drills")
	}
	h, err := Open(os.Getenv(relayCrashHomeEnv), &Options{Logger: testLoggerB(),
		HTTPClient: &http.Client{Timeout: 30 * time.Second}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	switch action {
	case "pass":
		_, err = h.pass(ctx, true)
	case "pull":
		_, err = h.relayReceive(ctx)
	default:
		err = fmt.Errorf("unknown action %q", action)
	}
	fmt.Fprintf(os.Stderr, "child: %s ended without reaching its failpoint (err %v)\n", action, err)
	os.Exit(3)
}

// runCrashChild runs the child on home doing action with point set to kill, and fails the test
// unless the child died of SIGKILL.
func runCrashChild(t *testing.T, home, action, point string) {
	t.Helper()
	testkit.RunKilled(t, testkit.Child("TestRelayCrashChildProcess", relayCrashChildEnv+"="+action, relayCrashHomeEnv+"="+home,
		failpoint.Env+"="+point+"="+string(failpoint.Kill)), "child "+action+" at "+point)
}

// crashHost is a host whose store the parent closes while a child uses it, then reopens.
type crashHost struct {
	t     *testing.T
	name  string
	dir   string
	clock *testkit.Clock
	th    *testHost
}

func newCrashHost(t *testing.T, name string, clock *testkit.Clock) *crashHost {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	seed := uint64(len(name))<<8 | uint64(name[0])
	if err := Init(dir, InitOptions{Host: name, Rand: testkit.Rand(seed), Clock: clock.Now}); err != nil {
		t.Fatalf("Init(%s): %v", name, err)
	}
	c := &crashHost{t: t, name: name, dir: dir, clock: clock}
	t.Cleanup(c.close)
	c.open()
	return c
}

func (c *crashHost) open() *testHost {
	c.t.Helper()
	h, err := Open(c.dir, &Options{Clock: c.clock.Now, Jitter: noJitter, Logger: testLogger(c.t).With("host", c.name),
		HTTPClient: &http.Client{Timeout: 30 * time.Second}})
	if err != nil {
		c.t.Fatalf("Open(%s): %v", c.name, err)
	}
	c.th = &testHost{Host: h, t: c.t, dir: c.dir, clock: c.clock}
	return c.th
}

func (c *crashHost) close() {
	if c.th != nil {
		if err := c.th.Host.Close(); err != nil {
			c.t.Errorf("Close(%s): %v", c.name, err)
		}
		c.th = nil
	}
}

// crash closes the host, runs the child on its store until it is killed at point, and reopens it
// with the parent's clock moved past anything the child (on the wall clock) scheduled.
func (c *crashHost) crash(action, point string) *testHost {
	c.t.Helper()
	c.close()
	runCrashChild(c.t, c.dir, action, point)
	c.clock.Advance(time.Minute)
	return c.open()
}

// pushLog records the relay's push answers as the hosts receive them.
type pushLog struct {
	mu  sync.Mutex
	got []mbx.PushResponse
}

func (p *pushLog) record(t *testing.T) func([]byte) []byte {
	return func(body []byte) []byte {
		var resp mbx.PushResponse
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Errorf("push answer: %v", err)
			return body
		}
		p.mu.Lock()
		p.got = append(p.got, resp)
		p.mu.Unlock()
		return body
	}
}

func (p *pushLog) answers() []mbx.PushResponse {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]mbx.PushResponse(nil), p.got...)
}

// crashPair is a relay and two hosts pinned to each other without LAN addresses, both enrolled.
func crashPair(t *testing.T, crashName string) (*testRelay, *crashHost, *testHost, *pushLog) {
	t.Helper()
	if testing.Short() {
		t.Skip("child process test")
	}
	clock := testkit.NewClock(time.Now().UTC()) // the child runs on the wall clock
	rel := newTestRelay(t, clock, mbx.Limits{})
	log := &pushLog{}
	rel.set(func(r *testRelay) { r.rewrite = log.record(t) })
	other := "beta"
	if crashName == "beta" {
		other = "alpha"
	}
	c := newCrashHost(t, crashName, clock)
	o := newTestHost(t, other, clock)
	pinNoLAN(t, c.th, o)
	c.th.useRelay(rel)
	o.useRelay(rel)
	return rel, c, o, log
}

// Drill 1: the relay committed the push, the sender died before recording the accept. The retry
// of the same bytes is a duplicate with the same seq, the row becomes relay-accepted at that seq,
// and the message arrives once.
func TestRelayCrashAfterPushBeforeRecord(t *testing.T) {
	_, ac, b, log := crashPair(t, "alpha")
	id := ac.th.send("alice", []string{"bob@beta"}, "crash drill", "pushed, not recorded").ID

	a := ac.crash("pass", FailRelayAfterPushBeforeRecord)
	ans := log.answers()
	if len(ans) != 1 || len(ans[0].Results) != 1 || ans[0].Results[0].Status != mbx.StatusAccepted ||
		len(ans[0].Results[0].Targets) != 1 {
		t.Fatalf("the child's push answers = %+v, want one accepted item", ans)
	}
	seq := ans[0].Results[0].Targets[0].Seq
	if r := a.row(id, "beta"); r.State != outbox.StatePending || r.Seq != 0 {
		t.Fatalf("row after the crash: %s seq %d, want pending without an acceptance", r.State, r.Seq)
	}

	if _, err := a.pass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	ans = log.answers()
	if len(ans) != 2 || len(ans[1].Results) != 1 || len(ans[1].Results[0].Targets) != 1 {
		t.Fatalf("push answers = %+v, want a second push of one item", ans)
	}
	if got := ans[1].Results[0]; got.Status != mbx.StatusDuplicate || got.Targets[0].Seq != seq {
		t.Fatalf("retry answer: %s seq %d, want %s seq %d", got.Status, got.Targets[0].Seq, mbx.StatusDuplicate, seq)
	}
	if r := a.row(id, "beta"); r.State != outbox.StateRelayAccepted || r.Seq != seq {
		t.Fatalf("row after the retry: %s seq %d, want %s seq %d", r.State, r.Seq, outbox.StateRelayAccepted, seq)
	}
	// Nothing more goes out for it: a pass pushes nothing.
	if _, err := a.pass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if n := len(log.answers()); n != 2 {
		t.Fatalf("%d pushes after the row was relay-accepted, want 2", n)
	}

	if n := b.pull(); n != 1 {
		t.Fatalf("beta pulled %d items, want 1", n)
	}
	flow(t, a, b)
	if got := b.copies("bob", id); got != 1 {
		t.Fatalf("bob holds %d copies, want 1", got)
	}
	if r := a.row(id, "beta"); r.State != outbox.StateDone {
		t.Fatalf("row after the receipt: %s (%s), want done", r.State, r.LastError)
	}
}

// Drill 2: the receiver committed a page (mail and checkpoint) and died before its ack. After the
// restart the next step pulls nothing new and its ack covers the committed seq; the mail is there
// once.
func TestRelayCrashAfterCommitBeforeAck(t *testing.T) {
	_, bc, a, _ := crashPair(t, "beta")
	id := a.send("alice", []string{"bob@beta"}, "crash drill", "committed, not acked").ID
	if _, err := a.pass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if r := a.row(id, "beta"); r.State != outbox.StateRelayAccepted {
		t.Fatalf("row = %s (%s), want relay-accepted", r.State, r.LastError)
	}

	b := bc.crash("pull", checkpoint.FailAfterCommitBeforeAck)
	if got := b.copies("bob", id); got != 1 {
		t.Fatalf("bob holds %d copies after the crash, want 1 (the page committed)", got)
	}
	l, err := b.relayLink()
	if err != nil {
		t.Fatal(err)
	}
	pos, err := b.rpos.Position(context.Background(), l.Pin.URL)
	if err != nil || pos.ReceivedThrough < 1 {
		t.Fatalf("position after the crash: %+v, %v; want received through the item", pos, err)
	}
	r, err := b.relayReceiver(l, checkpoint.ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Step(context.Background())
	if err != nil {
		t.Fatalf("step after the restart: %v", err)
	}
	if st.Pulled != 0 || st.Acked != pos.ReceivedThrough {
		t.Fatalf("step after the restart pulled %d and acked %d, want 0 and %d", st.Pulled, st.Acked, pos.ReceivedThrough)
	}
	flow(t, a, b)
	if got := b.copies("bob", id); got != 1 {
		t.Fatalf("bob holds %d copies, want 1", got)
	}
	if r := a.row(id, "beta"); r.State != outbox.StateDone {
		t.Fatalf("alpha's row: %s (%s), want done", r.State, r.LastError)
	}
}

// Drill 3: the receiver died while handling a page, before its commit. Nothing of the page
// survived; after the restart every item is processed once.
func TestRelayCrashMidPage(t *testing.T) {
	_, bc, a, _ := crashPair(t, "beta")
	ids := []string{
		a.send("alice", []string{"bob@beta"}, "crash drill 1", "mid page").ID,
		a.send("alice", []string{"bob@beta"}, "crash drill 2", "mid page").ID,
		a.send("alice", []string{"bob@beta"}, "crash drill 3", "mid page").ID,
	}
	if _, err := a.pass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if r := a.row(id, "beta"); r.State != outbox.StateRelayAccepted {
			t.Fatalf("row %s = %s (%s), want relay-accepted", id, r.State, r.LastError)
		}
	}

	b := bc.crash("pull", FailRelayHandledBeforeCommit)
	for _, id := range ids {
		if got := b.copies("bob", id); got != 0 {
			t.Fatalf("bob holds %d copies of %s after a crash before the commit, want 0", got, id)
		}
	}
	l, err := b.relayLink()
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := b.rpos.Position(context.Background(), l.Pin.URL); err != nil || pos.ReceivedThrough != 0 {
		t.Fatalf("position after the crash: %+v, %v; want nothing received", pos, err)
	}
	if n := b.pull(); n != len(ids) {
		t.Fatalf("beta pulled %d items after the restart, want %d", n, len(ids))
	}
	flow(t, a, b)
	for _, id := range ids {
		if got := b.copies("bob", id); got != 1 {
			t.Fatalf("bob holds %d copies of %s, want 1", got, id)
		}
		if r := a.row(id, "beta"); r.State != outbox.StateDone {
			t.Fatalf("alpha's row %s: %s (%s), want done", id, r.State, r.LastError)
		}
	}
	if got := len(b.inbox("bob", true)); got != len(ids) {
		t.Fatalf("bob's mailbox holds %d messages, want %d", got, len(ids))
	}
}
