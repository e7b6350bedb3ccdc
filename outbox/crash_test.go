package outbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

// The crash test re-runs the test binary as a child that writes to a real (fsynced) bbolt file
// and prints one line for every operation after its call returned — that is, after its commit.
// The parent SIGKILLs the child mid-stream, reopens the file, and checks that every answered
// operation is there and that the indexes agree with the rows. Three rounds run on the same file,
// so rounds 2 and 3 also write on top of a file that was killed mid-write.

const (
	envCrashDB    = "OUTBOX_CRASH_DB"
	envCrashRound = "OUTBOX_CRASH_ROUND"
)

// crashWire is the wire every child row carries, so the parent can check the bytes.
func crashWire(item, host string) []byte {
	return []byte(`{"v":3,"id":"` + item + `","to":["x@` + host + `"],"body":"sealed ` + strings.Repeat("z", len(item)*13%97) + `"}`)
}

func TestCrashKeepsAnsweredRows(t *testing.T) {
	if path := os.Getenv(envCrashDB); path != "" {
		crashChild(path, os.Getenv(envCrashRound))
		return
	}
	if testing.Short() {
		t.Skip("child-process crash test skipped in -short mode")
	}
	path := filepath.Join(t.TempDir(), "host.db")
	added := map[Key]bool{}
	states := map[Key]answered{}
	for round := 1; round <= 3; round++ {
		crashRound(t, path, round, added, states)
		verifyAfterCrash(t, path, added, states)
	}
	t.Logf("%d answered adds and %d answered transitions survived three SIGKILLs", len(added), len(states))
}

type answered struct {
	state    State
	attempts int
}

func crashRound(t *testing.T, path string, round int, added map[Key]bool, states map[Key]answered) {
	t.Helper()
	cmd := testkit.Child("TestCrashKeepsAnsweredRows", envCrashDB+"="+path, envCrashRound+"="+strconv.Itoa(round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill after this many answers: not a multiple of anything the child does.
	killAt := 150 + 37*round
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(3 * time.Minute)
	n, killed := 0, false
	for !killed || lines != nil {
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				if !killed {
					_ = cmd.Wait()
					t.Fatalf("round %d: child ended before it was killed (after %d answers)", round, n)
				}
				continue
			}
			recordAnswer(t, line, added, states)
			n++
			if n == killAt && !killed {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatalf("kill: %v", err)
				}
				killed = true
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatalf("round %d: child answered only %d operations in 3 minutes", round, n)
		}
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child did not die of SIGKILL: %v", round, err)
	}
}

// recordAnswer reads "add ITEM HOST" or "state ITEM HOST STATE ATTEMPTS".
func recordAnswer(t *testing.T, line string, added map[Key]bool, states map[Key]answered) {
	t.Helper()
	f := strings.Fields(line)
	switch {
	case strings.HasPrefix(line, "=== "): // the test runner's own chatter under -v
	case len(f) == 3 && f[0] == "add":
		added[Key{f[1], f[2]}] = true
	case len(f) == 5 && f[0] == "state":
		st, err := ParseState(f[3])
		n, err2 := strconv.Atoi(f[4])
		if err != nil || err2 != nil {
			t.Fatalf("bad child line %q", line)
		}
		states[Key{f[1], f[2]}] = answered{st, n}
	default:
		t.Fatalf("bad child line %q", line)
	}
}

func verifyAfterCrash(t *testing.T, path string, added map[Key]bool, states map[Key]answered) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer db.Close()
	if err := db.View(func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("bbolt check after SIGKILL: %v", err)
	}
	s, err := Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
	for k := range added {
		r, err := s.Get(context.Background(), k)
		if err != nil {
			t.Fatalf("answered add %s lost: %v", k, err)
		}
		if string(r.Wire) != string(crashWire(k.ItemID, k.Host)) {
			t.Fatalf("%s: wire = %q", k, r.Wire)
		}
	}
	for k, a := range states {
		r, err := s.Get(context.Background(), k)
		if err != nil {
			t.Fatalf("row %s of an answered transition lost: %v", k, err)
		}
		// Later operations may have committed without being answered: the stored row may be
		// further along, never behind.
		if r.State < a.state || r.Attempts < a.attempts {
			t.Fatalf("%s: stored %s after %d attempts, but %s after %d was answered", k, r.State, r.Attempts, a.state, a.attempts)
		}
	}
}

// crashChild writes until it is killed: four goroutines add rows through Batch, one walks added
// rows through transitions. Each prints its answer after the call returned.
func crashChild(path, round string) {
	go func() { // never outlive a parent that died
		time.Sleep(3 * time.Minute)
		os.Exit(3)
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	s, err := Open(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child outbox open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	die := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	fresh := make(chan Key, 1024)
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				host := fmt.Sprintf("host-%d", (g+i)%3)
				item := fmt.Sprintf("R%s-G%d-M%05d", round, g, i)
				n := NewRow{Kind: KindEnvelope, ItemID: item, Host: host, HostKey: testKey(g),
					Wire: crashWire(item, host), Agent: "alice", Subject: "crash " + item}
				if _, err := s.Add(ctx, n); err != nil {
					die(err)
				}
				say("add %s %s", item, host)
				select {
				case fresh <- n.Key():
				default:
				}
			}
		}()
	}
	for {
		k := <-fresh
		steps := []func() (Row, error){
			func() (Row, error) {
				return s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("connection refused"))
			},
			func() (Row, error) {
				return s.MarkAttemptFailed(ctx, k, TransportLAN, errors.New("connection refused"))
			},
			func() (Row, error) {
				return s.MarkRelayAccepted(ctx, k, acceptance(time.Now(), "E"+round, time.Now().UnixMilli()))
			},
			func() (Row, error) { r, _, err := s.Settle(ctx, k.ItemID, k.Host); return r, err },
		}
		for _, step := range steps {
			r, err := step()
			if err != nil {
				die(err)
			}
			say("state %s %s %s %d", k.ItemID, k.Host, r.State, r.Attempts)
		}
	}
}
