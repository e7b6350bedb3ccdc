package host

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// TestDaemonRunsWhileLANPortTaken: a daemon whose LAN port is held by another listener keeps
// running: the control socket answers, local mail is delivered, status names the bind failure;
// once the port is freed the retried bind takes it and the failure is gone.
func TestDaemonRunsWhileLANPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().String()
	home := filepath.Join(t.TempDir(), "alpha")
	if err := Init(home, InitOptions{Host: "alpha"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan *Host, 1)
	opts := DaemonOptions{Listen: port, AddrFile: filepath.Join(home, "addr"), Tick: 100 * time.Millisecond,
		LANRetry: 20 * time.Millisecond, RelayWait: -1,
		Options: &Options{Logger: testLogger(t), HTTPClient: &http.Client{Timeout: 10 * time.Second}},
		Ready:   func(h *Host) { ready <- h }}
	go func() { done <- RunDaemon(ctx, home, opts) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon stopped with %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("daemon did not stop")
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon exited with the LAN port taken: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("daemon did not start")
	}

	c, err := client.Dial(ctx, home)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Daemon || !strings.Contains(st.LANError, "address already in use") {
		t.Fatalf("status while the port is taken: daemon=%v lan_error=%q", st.Daemon, st.LANError)
	}
	if _, err := os.Stat(opts.AddrFile); !os.IsNotExist(err) {
		t.Fatalf("addr file written without a LAN listener: %v", err)
	}
	for _, n := range []string{"ann", "bob"} {
		if _, err := c.AddAgent(ctx, api.Agent{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Send(ctx, api.SendRequest{From: "ann", To: []string{"bob"}, Body: "local mail without LAN"}); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Inbox(ctx, "bob", false)
	if err != nil || len(msgs) != 1 || msgs[0].Body != "local mail without LAN" {
		t.Fatalf("bob's inbox = %+v, %v", msgs, err)
	}

	taken.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err = c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.LANError == "" && st.Listen == port {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LAN bind not retried after the port was freed: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(opts.AddrFile)
	if err != nil || strings.TrimSpace(string(b)) != port {
		t.Fatalf("addr file = %q, %v; want %s", b, err, port)
	}
	// The LAN server now answers on the port (any HTTP answer will do: it is the daemon's).
	resp, err := http.Get("http://" + port + "/")
	if err != nil {
		t.Fatalf("LAN server after the retried bind: %v", err)
	}
	resp.Body.Close()
}
