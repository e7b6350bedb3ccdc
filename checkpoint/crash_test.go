//go:build unix

package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Crash tests: the test binary runs itself as a child receiver (TestCrashChild) with a failpoint
// enabled in MBX_FAILPOINT, the child is killed with SIGKILL at that point, and the parent checks
// what the bbolt file holds, then resumes as the receiver would after a restart.

const (
	envChildDB       = "MBX_INBOX_CRASH_DB"
	envChildRelay    = "MBX_INBOX_CRASH_RELAY"
	envChildRelayKey = "MBX_INBOX_CRASH_RELAY_KEY"
	envChildAlpha    = "MBX_INBOX_CRASH_ALPHA"    // alpha's host key: beta's only peer
	failMidPage      = "checkpoint.test.mid-page" // in the child's handler, before its third item
)

// TestCrashChild is the child process; it does nothing in a normal test run.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(envChildDB)
	if path == "" {
		t.Skip("the child of the crash tests")
	}
	pin := relayclient.Pin{URL: os.Getenv(envChildRelay), RelayKey: os.Getenv(envChildRelayKey)}
	beta := makeHost(t, pin, "beta", 2)
	s := openStore(t, path)
	h := &hostHandler{self: beta, peers: map[string]string{os.Getenv(envChildAlpha): "alpha"},
		midPage: func(n int) {
			if n == 3 {
				_ = failpoint.Inject(failMidPage)
			}
		}}
	r, err := s.NewReceiver(pin.URL, clientRelay{beta.c}, h, &ReceiverOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		st, err := r.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !st.More {
			break
		}
	}
	t.Log("child finished without being killed")
}

func TestCrashAfterCommitBeforeAck(t *testing.T) {
	crashScenario(t, FailAfterCommitBeforeAck, true)
}

func TestCrashInTheMiddleOfAPage(t *testing.T) {
	crashScenario(t, failMidPage, false)
}

func crashScenario(t *testing.T, point string, committed bool) {
	pin := startRelay(t)
	alpha, beta := makeHost(t, pin, "alpha", 1), makeHost(t, pin, "beta", 2)
	alpha.enrol(t)
	beta.enrol(t)
	ids := send(t, alpha, beta, 5, 30)
	ctx := context.Background()
	before, err := beta.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	head := before.You.HeadSeq

	path := filepath.Join(t.TempDir(), "state.db")
	testkit.RunKilled(t, testkit.Child("TestCrashChild", envChildDB+"="+path, envChildRelay+"="+pin.URL,
		envChildRelayKey+"="+pin.RelayKey, envChildAlpha+"="+alpha.key.PublicKey(), failpoint.Env+"="+point+"=kill"),
		"child receiver at "+point)

	// What survived the kill.
	s := openStore(t, path)
	pos, err := s.Position(ctx, pin.URL)
	if err != nil {
		t.Fatal(err)
	}
	handled, _ := readCounts(t, s.DB())
	if committed {
		if pos.ReceivedThrough != head || pos.Epoch != before.Epoch {
			t.Fatalf("position after the kill %+v, want the page committed through %d", pos, head)
		}
		for _, id := range ids {
			if handled[id] != 1 {
				t.Fatalf("%s handled %d times before the kill, want 1", id, handled[id])
			}
		}
	} else if pos.ReceivedThrough != 0 || len(handled) != 0 {
		t.Fatalf("position %+v and %d handled after a kill inside the page's transaction, want nothing", pos, len(handled))
	}
	if info, err := beta.c.Info(ctx); err != nil || info.You.AckedThrough != 0 {
		t.Fatalf("relay acked through %d (%v) after a kill before any ack, want 0", info.You.AckedThrough, err)
	}

	// The restarted receiver: pull again (the relay still holds everything), skip or redo what
	// the checkpoint says, ack.
	h := &hostHandler{self: beta, peers: map[string]string{alpha.key.PublicKey(): "alpha"}}
	r, err := s.NewReceiver(pin.URL, clientRelay{beta.c}, h, &ReceiverOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantDone := 5
	if committed {
		wantDone = 0
	}
	if st.Done() != wantDone || st.Acked != head {
		t.Fatalf("restart step: %+v; want %d done and an ack through %d", st, wantDone, head)
	}
	handled, delivered := readCounts(t, s.DB())
	for _, id := range ids {
		if handled[id] != 1 || delivered[id] == "" {
			t.Fatalf("%s handled %d times in all, want exactly once", id, handled[id])
		}
	}
	if n, _ := s.Quarantine().List(ctx, quarantine.Filter{}); len(n) != 0 {
		t.Fatalf("quarantine holds %d entries, want none", len(n))
	}
	after, err := beta.c.Info(ctx)
	if err != nil || after.You.AckedThrough != head {
		t.Fatalf("relay acked through %d (%v), want %d", after.You.AckedThrough, err, head)
	}
}
