package host

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/rotation"
)

// SIGKILL drills of a host key rotation. The rotating host (alpha) runs as a child — this test
// binary re-run as TestRotationCrashChildProcess — either preparing the rotation (`id rotate`'s
// local part) or running as a real daemon (RunDaemon) that carries the network steps, with
// MBX_FAILPOINT killing it at one named point. The relay and alpha's peers run in the parent:
// beta reaches alpha only through the relay, gamma over the LAN. The parent then opens alpha's
// home again (a restart), lets the rotation finish, and checks that every step is done once:
// both peers pin the new key with the old one retired, the relay moved alpha's queue, and mail
// queued before the crash and sent after it arrives once each way.

const (
	rotCrashChildEnv = "HOST_ROTATE_CRASH_CHILD" // prepare or daemon
	rotCrashHomeEnv  = "HOST_ROTATE_CRASH_HOME"
)

// TestRotationCrashChildProcess is the child of the rotation drills; it does nothing in a normal
// test run. A child that gets past its work without being killed exits 3.
func TestRotationCrashChildProcess(t *testing.T) {
	action := os.Getenv(rotCrashChildEnv)
	if action == "" {
		t.Skip("run as a child by the rotation crash drills")
	}
	home := os.Getenv(rotCrashHomeEnv)
	var err error
	switch action {
	case "prepare":
		_, err = PrepareRotation(home, rotation.Options{})
	case "daemon", "daemon-rotate":
		ctx, cancel := context.WithTimeout(context.Background(), testkit.ChildWait)
		defer cancel()
		var once sync.Once
		err = RunDaemon(ctx, home, DaemonOptions{Listen: "127.0.0.1:0", RelayWait: -1, Tick: 100 * time.Millisecond,
			Options: &Options{Logger: testLoggerB(), HTTPClient: &http.Client{Timeout: 10 * time.Second}},
			Ready: func(h *Host) {
				if action == "daemon-rotate" { // `id rotate` through the running daemon
					once.Do(func() { go h.RotateKeys(ctx) })
				}
			}})
	default:
		err = fmt.Errorf("unknown action %q", action)
	}
	fmt.Fprintf(os.Stderr, "child: %s ended without reaching its failpoint (err %v)\n", action, err)
	os.Exit(3)
}

// rotCrash is the drill's world.
type rotCrash struct {
	t       *testing.T
	rel     *testRelay
	a       *crashHost
	b, g    *testHost // beta: relay only; gamma: LAN
	queued  string    // beta's mail to alpha, queued at the relay for alpha's old key
	oldA    string
	oldEncA string
}

func newRotCrash(t *testing.T) *rotCrash {
	t.Helper()
	if testing.Short() {
		t.Skip("child process test")
	}
	clock := testkit.NewClock(time.Now().UTC()) // the child runs on the wall clock
	w := &rotCrash{t: t, rel: newTestRelay(t, clock, mbx.Limits{})}
	w.a = newCrashHost(t, "alpha", clock)
	w.b, w.g = newTestHost(t, "beta", clock), newTestHost(t, "gamma", clock)
	a := w.a.th
	pinNoLAN(t, a, w.b)
	pinEach(t, (*testHost).record, w.g, a)
	// Alpha serves no LAN in the parent: gamma pins it without an address, alpha pins gamma's.
	for _, h := range []*testHost{a, w.b, w.g} {
		h.useRelay(w.rel)
	}
	w.oldA, w.oldEncA = a.key.PublicKey(), a.enc.PublicKey()
	// Mail before: both ways, settled. Then beta's message waits in the relay for alpha.
	a.send("alice", []string{"bob@beta", "gina@gamma"}, "before", "settled before the rotation")
	flow(t, a, w.b, w.g)
	w.queued = w.b.send("bob", []string{"alice@alpha"}, "queued", "waits at the relay for alpha's old key").ID
	if _, err := w.b.pass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if s := w.b.rowState(w.queued, "alpha"); s != outbox.StateRelayAccepted {
		t.Fatalf("beta's queued row is %s, want relay-accepted", s)
	}
	return w
}

// crash runs the child doing action on alpha's home until point kills it, then opens the home
// again (a restart), with the parent's clock past anything the child scheduled.
func (w *rotCrash) crash(action, point string) *testHost {
	w.t.Helper()
	w.a.close()
	testkit.RunKilled(w.t, testkit.Child("TestRotationCrashChildProcess", rotCrashChildEnv+"="+action,
		rotCrashHomeEnv+"="+w.a.dir, failpoint.Env+"="+point+"="+string(failpoint.Kill)), "child "+action+" at "+point)
	w.a.clock.Advance(time.Minute)
	return w.a.open()
}

// checkKeptOldKeys: the old host and enc keys are in the retired files.
func (w *rotCrash) checkKeptOldKeys() {
	w.t.Helper()
	for file, pub := range map[string]string{rotation.RetiredHost: w.oldA, RetiredEnc: w.oldEncA} {
		files, err := rotation.ReadKeyList(filepath.Join(w.a.dir, file))
		if err != nil {
			w.t.Fatal(err)
		}
		if !slices.ContainsFunc(files, func(f mbx.KeyFile) bool { return f.PublicKey == pub }) {
			w.t.Fatalf("%s does not hold the old key %s", file, mbx.Fingerprint(pub))
		}
	}
}

// finish lets the restarted alpha finish the rotation and checks the world after it.
func (w *rotCrash) finish(a *testHost) {
	t := w.t
	t.Helper()
	w.checkKeptOldKeys()
	st, err := a.rot.Load()
	if err != nil || st == nil {
		t.Fatalf("no rotation stored after the crash: %v", err)
	}
	if a.key.PublicKey() != st.Signed.Rec.NewPub || a.enc.PublicKey() != st.Signed.Rec.NewEncPub {
		t.Fatalf("alpha opened with %s, want the rotation's new key", a.key.Fingerprint())
	}
	a.finishRotation()
	st, _ = a.rot.Load()
	if st.Relay.Checked == "" || !st.Peers["beta"].Noticed() || st.Peers["gamma"].LAN == "" {
		t.Fatalf("rotation after the restart: relay %+v beta %+v gamma %+v", st.Relay, st.Peers["beta"], st.Peers["gamma"])
	}
	w.b.pull()
	w.b.checkRotated("alpha", st.Signed)
	w.g.checkRotated("alpha", st.Signed)

	after := map[*testHost]string{
		w.b: w.b.send("bob", []string{"alice@alpha"}, "after", "from beta, after").ID,
		w.g: w.g.send("gina", []string{"alice@alpha"}, "after", "from gamma, after").ID,
	}
	fromA := a.send("alice", []string{"bob@beta", "gina@gamma"}, "after", "from alpha, new key").ID
	w.a.clock.Advance(time.Hour) // past every backoff
	flow(t, a, w.b, w.g)
	for _, id := range []string{w.queued, after[w.b], after[w.g]} {
		if n := a.copies("alice", id); n != 1 {
			t.Errorf("alice holds %d copies of %s, want 1", n, id)
		}
	}
	if w.b.copies("bob", fromA) != 1 || w.g.copies("gina", fromA) != 1 {
		t.Error("alpha's mail after the rotation did not arrive once at each peer")
	}
	flow(t, a, w.b, w.g)
	for _, h := range []*testHost{a, w.b} {
		h.allDone()
	}
}

// TestRotationCrashDuringPrepare: killed in the local part of a rotation, run by `id rotate`
// without a daemon (prepare) or by the running daemon (daemon-rotate: RotateKeys).
func TestRotationCrashDuringPrepare(t *testing.T) {
	for _, c := range []struct{ action, point string }{
		{"prepare", rotation.FailPrepared}, {"prepare", rotation.FailEncSwapped}, {"prepare", rotation.FailSwapped},
		{"daemon-rotate", rotation.FailPrepared}, {"daemon-rotate", rotation.FailSwapped},
	} {
		t.Run(c.action+"/"+c.point, func(t *testing.T) {
			w := newRotCrash(t)
			a := w.crash(c.action, c.point)
			w.finish(a)
			for _, f := range []string{rotation.NextHostKey, rotation.NextEncKey} {
				if _, err := os.Stat(filepath.Join(w.a.dir, f)); err == nil {
					t.Errorf("%s left behind", f)
				}
			}
		})
	}
}

func TestRotationCrashInDaemon(t *testing.T) {
	for _, point := range []string{rotation.FailNoticed, rotation.FailRelayRotated, rotation.FailReset, rotation.FailLANSent} {
		t.Run(point, func(t *testing.T) {
			w := newRotCrash(t)
			w.a.close()
			if _, err := PrepareRotation(w.a.dir, rotation.Options{Rand: testkit.Rand(77), Clock: w.a.clock.Now}); err != nil {
				t.Fatal(err)
			}
			w.a.open()
			a := w.crash("daemon", point)
			w.finish(a)
		})
	}
}
