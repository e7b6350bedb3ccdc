package host

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/relaytest"
)

// startRelay runs the real relay on 127.0.0.1 with real clocks and returns its URL and key.
func startRelay(t testing.TB) (string, mbx.SigningKey) {
	t.Helper()
	r := relaytest.Start(t, 910, relayserver.Options{EnrolCallsPerMinute: -1, PushesPerMinute: -1})
	return r.URL, r.Key
}

// runDaemonOpts runs RunDaemon on an initialized home with opts (the test's defaults filled in).
func runDaemonOpts(t *testing.T, home, name string, opts DaemonOptions) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{home: home, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan *Host, 1)
	opts.Listen = "127.0.0.1:0"
	opts.AddrFile = filepath.Join(home, "addr")
	if opts.Tick == 0 {
		opts.Tick = 100 * time.Millisecond
	}
	opts.Options = &Options{Logger: testLogger(t).With("host", name), HTTPClient: &http.Client{Timeout: 10 * time.Second}}
	opts.Ready = func(h *Host) { ready <- h }
	go func() { d.done <- RunDaemon(ctx, home, opts) }()
	select {
	case d.h = <-ready:
	case err := <-d.done:
		t.Fatalf("daemon %s: %v", name, err)
	case <-time.After(time.Minute):
		t.Fatalf("daemon %s did not start", name)
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

// TestRelayDaemons: two daemons with no LAN route between them, a relay pinned over their
// control sockets; the daemons' own loops enrol, publish, push, pull and send the receipts back.
func TestRelayDaemons(t *testing.T) {
	url, key := startRelay(t)
	homes := map[string]string{}
	for _, n := range []string{"alpha", "beta"} {
		homes[n] = filepath.Join(t.TempDir(), n)
		if err := Init(homes[n], InitOptions{Host: n}); err != nil {
			t.Fatal(err)
		}
	}
	a := runDaemonOpts(t, homes["alpha"], "alpha", DaemonOptions{RelayWait: -1})
	b := runDaemonOpts(t, homes["beta"], "beta", DaemonOptions{RelayWait: -1})
	for _, p := range []struct{ d, peer *daemon }{{a, b}, {b, a}} {
		rec := p.peer.record(t)
		rec.Addr = ""
		if err := p.d.h.PinPeer(rec); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients := map[string]*client.Client{}
	for n, home := range homes {
		c, err := client.Dial(ctx, home)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[n] = c
		st, err := c.RelaySet(ctx, api.RelaySetRequest{URL: url, Key: key.Fingerprint()})
		if err != nil || !st.Configured || !st.Daemon || st.Fingerprint != key.Fingerprint() {
			t.Fatalf("%s: RelaySet over the socket = %+v, %v", n, st, err)
		}
	}
	ca, cb := clients["alpha"], clients["beta"]
	waitFor(t, "both enrolled", func() bool {
		for _, c := range clients {
			if st, err := c.RelayStatus(ctx); err != nil || !st.Enrolled || st.Senders != 1 || st.EncAdExp == "" {
				return false
			}
		}
		return true
	})
	res, err := ca.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@beta"}, Subject: "through the daemons", Body: "relay only"})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cb.Wait(ctx, "bob", 50*time.Second)
	if err != nil || len(msgs) != 1 || msgs[0].ID != res.ID {
		t.Fatalf("bob waited for %+v, %v", msgs, err)
	}
	if _, err := cb.Ack(ctx, api.AckRequest{ID: res.ID, Agent: "bob", Note: "thanks"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the acked receipt at alpha", func() bool {
		s, err := ca.Sent(ctx, res.ID)
		return err == nil && len(s.Recipients) == 1 && s.Recipients[0].State == "acked" && s.Rows[0].State == "done"
	})
	rows, err := ca.Outbox(ctx)
	if err != nil || len(rows) != 1 || rows[0].Transport != "relay" || rows[0].Relay != url || rows[0].Seq == 0 {
		t.Fatalf("alpha's outbox = %+v, %v", rows, err)
	}
	q, err := cb.RelayQuarantine(ctx)
	if err != nil || len(q) != 0 {
		t.Fatalf("beta's quarantine = %+v, %v", q, err)
	}
	// Unset over the socket: the daemon stops using the relay.
	if st, err := ca.RelayUnset(ctx); err != nil || st.Configured {
		t.Fatalf("unset = %+v, %v", st, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
