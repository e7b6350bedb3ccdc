package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/outbox"
)

// t0 is the tests' starting time.
var t0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

func newClock() *testkit.Clock { return testkit.NewClock(t0) }

// testHost is a host on loopback with its LAN server running.
type testHost struct {
	*Host
	t     *testing.T
	dir   string
	addr  string
	ln    net.Listener
	srv   *http.Server
	gate  *gate
	clock *testkit.Clock
}

// gate sits in front of a host's LAN mux so a test can take the host "down" or lose answers.
type gate struct {
	mu       sync.Mutex
	down     bool // answer 503 without looking
	mute     bool // close every connection without an answer, handling nothing
	dropNext int  // handle the next n requests, then drop their answers (connection closed)
	seen     int  // requests that reached the gate, whatever it did with them
	next     http.Handler
}

// requests is how many requests reached the gate so far.
func (g *gate) requests() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.seen++
	down, mute, drop, next := g.down, g.mute, g.dropNext > 0, g.next
	if drop && !mute {
		g.dropNext--
	}
	g.mu.Unlock()
	switch {
	case mute:
		hangUp(w)
	case down:
		http.Error(w, `{"error":"down"}`, http.StatusServiceUnavailable)
	case drop:
		next.ServeHTTP(discardWriter{h: http.Header{}}, r)
		hangUp(w)
	default:
		next.ServeHTTP(w, r)
	}
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("no hijacker")
	}
	c, _, err := hj.Hijack()
	if err == nil {
		c.Close()
	}
}

// setNext puts another handler behind the gate (a host opened again).
func (g *gate) setNext(h http.Handler) { g.mu.Lock(); g.next = h; g.mu.Unlock() }

func (g *gate) setDown(v bool) { g.mu.Lock(); g.down = v; g.mu.Unlock() }
func (g *gate) setMute(v bool) { g.mu.Lock(); g.mute = v; g.mu.Unlock() }
func (g *gate) drop(n int)     { g.mu.Lock(); g.dropNext = n; g.mu.Unlock() }

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}

func testLogger(t *testing.T) *slog.Logger { return testLoggerB() }

// testLoggerB discards logs unless HOST_TEST_LOG is set.
func testLoggerB() *slog.Logger {
	if os.Getenv("HOST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newTestHost initializes and opens a host named name in a temporary home, serving its LAN mux
// on 127.0.0.1:0.
func newTestHost(t *testing.T, name string, clock *testkit.Clock) *testHost {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	seed := uint64(len(name))<<8 | uint64(name[0])
	if err := Init(dir, InitOptions{Host: name, Rand: testkit.Rand(seed), Clock: clock.Now}); err != nil {
		t.Fatalf("Init(%s): %v", name, err)
	}
	h, err := Open(dir, &Options{Clock: clock.Now, Rand: testkit.Rand(seed + 1), Jitter: noJitter, Logger: testLogger(t).With("host", name),
		HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	th := &testHost{Host: h, t: t, dir: dir, clock: clock}
	th.gate = &gate{next: h.LANMux()}
	th.serve("127.0.0.1:0")
	t.Cleanup(func() {
		th.stop()
		if err := h.Close(); err != nil {
			t.Errorf("Close(%s): %v", name, err)
		}
	})
	return th
}

func (th *testHost) serve(addr string) {
	th.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		th.t.Fatalf("listen: %v", err)
	}
	th.ln, th.addr = ln, ln.Addr().String()
	th.srv = &http.Server{Handler: th.gate}
	go th.srv.Serve(ln)
}

func (th *testHost) stop() {
	if th.srv != nil {
		th.srv.Close()
		th.srv = nil
	}
}

func (th *testHost) record() PeerRecord {
	return PeerRecord{Host: th.name, HostPubkey: th.key.PublicKey(), EncPub: th.enc.PublicKey(), Addr: th.addr}
}

// pairAll pins every host to every other.
func pairAll(t *testing.T, hs ...*testHost) {
	t.Helper()
	pinEach(t, (*testHost).record, hs...)
}

// pinEach pins every host to every other, as rec describes it.
func pinEach(t *testing.T, rec func(*testHost) PeerRecord, hs ...*testHost) {
	t.Helper()
	for _, a := range hs {
		for _, b := range hs {
			if a != b {
				if err := a.PinPeer(rec(b)); err != nil {
					t.Fatalf("%s.PinPeer(%s): %v", a.name, b.name, err)
				}
			}
		}
	}
}

// settle runs passes on every host until no host has anything due (receipts answer envelopes,
// so it takes a few rounds).
func settle(t *testing.T, hs ...*testHost) {
	t.Helper()
	rounds(t, false, hs...)
}

// rounds runs outbox passes on every host, and relay pulls too with pull, until nothing moves.
func rounds(t *testing.T, pull bool, hs ...*testHost) {
	t.Helper()
	ctx := context.Background()
	for round := 0; round < 12; round++ {
		n := 0
		for _, h := range hs {
			k, err := h.pass(ctx, true)
			if err != nil {
				t.Fatalf("%s pass: %v", h.name, err)
			}
			n += k
		}
		if pull {
			for _, h := range hs {
				n += h.pull()
			}
		}
		if n == 0 {
			return
		}
	}
	t.Fatalf("hosts did not settle in 12 rounds")
}

func (th *testHost) send(from string, to []string, subject, body string) api.SendResult {
	th.t.Helper()
	res, err := th.Send(context.Background(), api.SendRequest{From: from, To: to, Subject: subject, Body: body})
	if err != nil {
		th.t.Fatalf("%s: Send(%s → %v): %v", th.name, from, to, err)
	}
	return res
}

func (th *testHost) inbox(agent string, all bool) []api.Message {
	th.t.Helper()
	ms, err := th.mail.Inbox(context.Background(), agent, all)
	if err != nil {
		th.t.Fatalf("%s: Inbox(%s): %v", th.name, agent, err)
	}
	return ms
}

func (th *testHost) rows() []outbox.Row {
	th.t.Helper()
	rs, err := th.ob.List(context.Background(), outbox.Filter{})
	if err != nil {
		th.t.Fatalf("%s: outbox list: %v", th.name, err)
	}
	return rs
}

func (th *testHost) row(item, host string) outbox.Row {
	th.t.Helper()
	r, err := th.ob.Get(context.Background(), outbox.Key{ItemID: item, Host: host})
	if err != nil {
		th.t.Fatalf("%s: outbox get %s→%s: %v", th.name, item, host, err)
	}
	return r
}

// counts returns the number of keys in each of the host's buckets and outbox rows, to show that
// a refused request stored nothing.
func (th *testHost) counts() map[string]int {
	th.t.Helper()
	out := map[string]int{}
	err := th.db.View(func(tx *bbolt.Tx) error {
		for _, b := range allBuckets {
			out[string(b)] = tx.Bucket(b).Stats().KeyN
		}
		return nil
	})
	if err != nil {
		th.t.Fatal(err)
	}
	out["outbox rows"] = len(th.rows())
	return out
}

func subjects(ms []api.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Subject)
	}
	return out
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// noJitter turns the outbox's backoff jitter off, so tests can step the clock by the schedule.
func noJitter() float64 { return 0.5 }

// dialDaemon connects to the daemon serving home; the connection closes when the test ends.
func dialDaemon(t *testing.T, home string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), home)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
