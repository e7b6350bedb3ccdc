package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/outbox"
)

// daemon runs RunDaemon on a new home in the background and returns its Host once it serves.
type daemon struct {
	h      *Host
	home   string
	cancel context.CancelFunc
	done   chan error
}

func startDaemon(t *testing.T, name string) *daemon {
	t.Helper()
	home := filepath.Join(t.TempDir(), name)
	if err := Init(home, InitOptions{Host: name}); err != nil {
		t.Fatal(err)
	}
	return runDaemonOpts(t, home, name, DaemonOptions{Tick: 200 * time.Millisecond})
}

func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("daemon stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("daemon did not stop")
	}
}

func (d *daemon) record(t *testing.T) PeerRecord {
	addr, err := os.ReadFile(filepath.Join(d.home, "addr"))
	if err != nil {
		t.Fatal(err)
	}
	return PeerRecord{Host: d.h.Name(), HostPubkey: d.h.Key().PublicKey(), EncPub: d.h.EncKey().PublicKey(), Addr: strings.TrimSpace(string(addr))}
}

func TestDaemonsDeliverThroughSockets(t *testing.T) {
	a, b := startDaemon(t, "alpha"), startDaemon(t, "beta")
	if err := a.h.PinPeer(b.record(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.h.PinPeer(a.record(t)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(a.home, api.SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket: %v, %v", fi.Mode(), err)
	}
	// The daemon holds the store: direct opens are refused, a second daemon too.
	if _, err := Open(a.home, &Options{LockTimeout: 20 * time.Millisecond}); !errors.Is(err, api.ErrLocked) {
		t.Fatalf("Open while the daemon runs = %v, want api.ErrLocked", err)
	}
	if err := RunDaemon(context.Background(), a.home, DaemonOptions{Listen: "127.0.0.1:0"}); !errors.Is(err, api.ErrLocked) {
		t.Fatalf("second daemon = %v, want api.ErrLocked", err)
	}

	ctx := context.Background()
	ca := dialDaemon(t, a.home)
	cb := dialDaemon(t, b.home)
	st, err := ca.Status(ctx)
	if err != nil || !st.Daemon || st.Host != "alpha" || st.Peers != 1 {
		t.Fatalf("status = %+v, %v", st, err)
	}
	// bob waits on beta; alice sends on alpha; the daemons do the rest.
	waited := make(chan []api.Message, 1)
	go func() {
		ms, err := cb.Wait(ctx, "bob", time.Minute)
		if err != nil {
			t.Error(err)
		}
		waited <- ms
	}()
	res, err := ca.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta"}, Subject: "via daemons", Body: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	var got []api.Message
	select {
	case got = <-waited:
	case <-time.After(time.Minute):
		t.Fatal("bob's Wait did not return")
	}
	if len(got) != 1 || got[0].ID != res.ID {
		t.Fatalf("bob got %+v", got)
	}
	if _, err := cb.Ack(ctx, api.AckRequest{ID: res.ID, Agent: "bob", Note: "ok"}); err != nil {
		t.Fatal(err)
	}
	// The receipts reach alpha by themselves.
	deadline := time.Now().Add(time.Minute)
	for {
		sent, err := ca.Sent(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(sent.Recipients) == 1 && sent.Recipients[0].State == "acked" && sent.Rows[0].State == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sent never showed acked: %+v", sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Errors keep their kind over the socket.
	if _, err := ca.Send(ctx, api.SendRequest{From: "alice", To: []string{"xy@nowhere"}, Body: "x"}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("unknown host over the socket = %v, want a bad request", err)
	}

	// A clean stop: the socket goes away and the store opens again.
	a.stop(t)
	if _, err := os.Stat(filepath.Join(a.home, api.SocketName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after stop: %v", err)
	}
	h, err := Open(a.home, nil)
	if err != nil {
		t.Fatalf("open after stop: %v", err)
	}
	h.Close()
}

// TestCrashAfterSendAnswered: the test binary runs itself as a host that accepts a Send, prints
// the answer and is SIGKILLed; the store it leaves holds the row, and the row is delivered.
func TestCrashAfterSendAnswered(t *testing.T) {
	if os.Getenv("HOST_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	if testing.Short() {
		t.Skip("child process test")
	}
	clock := testkit.NewClock(time.Now().UTC())
	b := newTestHost(t, "beta", clock)
	home := filepath.Join(t.TempDir(), "alpha")
	if err := Init(home, InitOptions{Host: "alpha"}); err != nil {
		t.Fatal(err)
	}
	a, err := Open(home, &Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PinPeer(b.record()); err != nil {
		t.Fatal(err)
	}
	if err := b.PinPeer(PeerRecord{Host: "alpha", HostPubkey: a.Key().PublicKey(), EncPub: a.EncKey().PublicKey()}); err != nil {
		t.Fatal(err)
	}
	a.Close()

	cmd := testkit.Child("TestCrashAfterSendAnswered", "HOST_CRASH_CHILD=1", "HOST_CRASH_HOME="+home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SENT "); ok {
			id = v
			break
		}
	}
	if id == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not answer a send (%v)", sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	h, err := Open(home, &Options{Clock: clock.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer h.Close()
	r, err := h.ob.Get(context.Background(), outbox.Key{ItemID: id, Host: "beta"})
	if err != nil || r.State != outbox.StatePending || len(r.Wire) == 0 {
		t.Fatalf("row after the crash: %+v, %v; want pending with its wire", r, err)
	}
	clock.Advance(time.Minute) // the child's clock was the wall clock
	if _, err := h.pass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if r, _ := h.ob.Get(context.Background(), outbox.Key{ItemID: id, Host: "beta"}); r.State != outbox.StateDone {
		t.Fatalf("row after the pass: %s (%s), want done", r.State, r.LastError)
	}
	if got := b.inbox("bob", true); len(got) != 1 || got[0].ID != id {
		t.Fatalf("bob's inbox = %+v", got)
	}
}

// crashChild is the child of TestCrashAfterSendAnswered: it sends, answers on stdout and waits to
// be killed.
func crashChild() {
	h, err := Open(os.Getenv("HOST_CRASH_HOME"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	res, err := h.Send(context.Background(), api.SendRequest{From: "alice", To: []string{"bob@beta"}, Subject: "survives", Body: "SIGKILL"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Printf("SENT %s\n", res.ID)
	os.Stdout.Sync()
	select {}
}

// The daemon streams its deliveries to a subscriber over the control socket: mail from another
// host is an event once it is committed, and the stream ends when the daemon stops.
func TestDaemonStreamsDeliveries(t *testing.T) {
	a, b := startDaemon(t, "alpha"), startDaemon(t, "beta")
	if err := a.h.PinPeer(b.record(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.h.PinPeer(a.record(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events, err := dialDaemon(t, b.home).MailEvents(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	res, err := dialDaemon(t, a.home).Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta", "carol@beta"}, Body: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev != (api.MailEvent{Agent: "bob", ID: res.ID, Thread: res.ID, From: "alice@alpha"}) {
			t.Errorf("event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event for bob's mail")
	}
	b.stop(t)
	for ev := range events {
		t.Errorf("event %+v: carol's copy is not bob's, and none came after", ev)
	}
}
