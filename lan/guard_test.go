package lan_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// The LAN server's adversarial tests (docs/design.md: Quotas and bounds): bounded loops on
// loopback, no assertion on wall-clock time.

var t0 = time.UnixMilli(1773480413589).UTC()

func key(_ *testing.T, n byte) mbx.SigningKey { return keyN(n) }

// keyN is a deterministic test key (the abuse child process makes the same keys).
func keyN(n byte) mbx.SigningKey {
	k, err := mbx.GenerateSigningKey(rand.NewChaCha8([32]byte{n}))
	if err != nil {
		panic(err)
	}
	return k
}

// fakeHost pins one peer, alpha, and stores nothing.
type fakeHost struct {
	me, alpha mbx.SigningKey
	received  atomic.Int64
}

func (h *fakeHost) Name() string        { return "me" }
func (h *fakeHost) Key() mbx.SigningKey { return h.me }
func (h *fakeHost) EncKey() mbx.EncKey  { return mbx.EncKey{} }
func (h *fakeHost) Peer(name string) (outbox.Peer, bool, error) {
	if name != "alpha" {
		return outbox.Peer{}, false, nil
	}
	return outbox.Peer{Host: "alpha", HostPubkey: h.alpha.PublicKey()}, true, nil
}
func (h *fakeHost) ReceiveEnvelopes(_ outbox.Peer, wires [][]byte, _ bool) ([]string, error) {
	h.received.Add(int64(len(wires)))
	sts := make([]string, len(wires))
	for i := range sts {
		sts[i] = "delivered"
	}
	return sts, nil
}
func (h *fakeHost) ReceiveReceipts(outbox.Peer, []json.RawMessage) ([]mbx.ReceiptResult, error) {
	return nil, nil
}
func (h *fakeHost) PeerReached(outbox.Peer) {}

type lanWorld struct {
	t     *testing.T
	h     *fakeHost
	srv   *lan.Server
	clock *testkit.Clock
	addr  string
	log   *testkit.SyncBuffer
	held  atomic.Int32 // connections hold opened, for their source addresses
}

// dialSpread dials addr from the loopback address 127.0.3.N, N from i, so that many test
// connections stand for many hosts (the LAN server bounds the connections of each address).
func dialSpread(addr string, i int) (net.Conn, error) {
	src := net.IPv4(127, 0, byte(3+i/250), byte(1+i%250))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 30 * time.Second}
	return d.Dial("tcp", addr)
}

func newLAN(t *testing.T, opt lan.ServerOptions) *lanWorld {
	w := &lanWorld{t: t, h: &fakeHost{me: key(t, 1), alpha: key(t, 2)}, clock: testkit.NewClock(t0), log: &testkit.SyncBuffer{}}
	opt.Clock, opt.Logger = w.clock.Now, slog.New(slog.NewTextHandler(w.log, nil))
	w.srv = lan.NewServer(w.h, opt)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: w.srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	go hs.Serve(w.srv.Limit(ln))
	t.Cleanup(func() { hs.Close() })
	w.addr = ln.Addr().String()
	return w
}

// hold sends the header of a POST of length body bytes, signed by k as host name at ts (a junk
// signature when k is nil), and keeps the connection open.
func (w *lanWorld) hold(name string, ts time.Time, length int) (net.Conn, *bufio.Reader) {
	c, err := dialSpread(w.addr, int(w.held.Add(1)))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s: %s\r\n%s: %s\r\n%s: AAAA\r\n\r\n",
		mbx.PathLANEnvelopes, length, mbx.HeaderHost, name, mbx.HeaderTS, mbx.ISOTime(ts), mbx.HeaderSig)
	return c, bufio.NewReader(c)
}

func answer(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// send posts one envelope signed by alpha, as a paired peer would.
func (w *lanWorld) send() int {
	body := []byte(`{"envelopes":[{"v":3,"id":"01KKNTQ69NA67N0QBPXKXFN501"}]}`)
	req, _ := http.NewRequest("POST", "http://"+w.addr+mbx.PathLANEnvelopes, bytes.NewReader(body))
	for k, v := range mbx.SignLANHop(w.h.alpha, "alpha", 0, "POST", mbx.PathLANEnvelopes, body, w.clock.Now()) {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestLANHeadersCheckedBeforeTheBody(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{})
	for _, c := range []struct {
		what, name string
		ts         time.Time
	}{
		{"stranger", "mallory", t0},
		{"stale timestamp", "alpha", t0.Add(-time.Hour)},
		{"timestamp centuries ahead", "alpha", t0.AddDate(300, 0, 0)},
		{"no host", "", t0},
	} {
		c0, br := w.hold(c.name, c.ts, 1<<20)
		if code := answer(t, c0, br); code != 401 {
			t.Fatalf("%s = %d, want 401 before the body", c.what, code)
		}
	}
	if n := w.srv.BodyBytesInFlight(); n != 0 {
		t.Fatalf("refused requests hold %d budget bytes", n)
	}
	if code := w.send(); code != 200 || w.h.received.Load() != 1 {
		t.Fatalf("paired peer = %d, received %d", code, w.h.received.Load())
	}
}

func TestLANBodyBudget(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{BodyBudget: 1 << 20})
	// Holders that pass the header checks (a paired name, a fresh timestamp) and declare 1 MiB
	// hold nothing while only their headers have come.
	for range 10 {
		w.hold("alpha", t0, 1<<20)
	}
	if code := w.send(); code != 200 || w.srv.BodyBytesInFlight() != 0 {
		t.Fatalf("paired peer while header-only holders wait = %d, budget in use %d", code, w.srv.BodyBytesInFlight())
	}
	// Bytes that arrive are charged (256 KiB of buffer for 200 KiB): three holders fit under 7/8 of
	// the budget, a fourth is refused once its buffer would pass it.
	for range 3 {
		c, _ := w.hold("alpha", t0, 1<<20)
		if _, err := c.Write(bytes.Repeat([]byte{' '}, 200<<10)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3000 {
		if w.srv.BodyBytesInFlight() >= 3*(200<<10) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, br := w.hold("alpha", t0, 1<<20)
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, _ = c.Write(bytes.Repeat([]byte{' '}, 200<<10)) // the server may answer and close before all of it
	if code := answer(t, c, br); code != 503 {
		t.Fatalf("fourth holder = %d, want 503", code)
	}
	if code := w.send(); code != 200 {
		t.Fatalf("paired peer while the budget is held = %d", code)
	}
}

func TestLANRefusalLogIsRateLimited(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{})
	for range 100 {
		c, br := w.hold("mallory", t0, 10)
		answer(t, c, br)
		c.Close()
	}
	if n := strings.Count(w.log.String(), "LAN requests refused"); n != 1 {
		t.Fatalf("%d log lines for 100 refusals, want 1:\n%s", n, w.log.String())
	}
	w.clock.Advance(time.Minute)
	c, br := w.hold("mallory", t0.Add(time.Minute), 10)
	answer(t, c, br)
	if !strings.Contains(w.log.String(), "count=100") {
		t.Fatalf("no summary with the count:\n%s", w.log.String())
	}
}

// countingApplier counts the rotation records it is given and refuses them all.
type countingApplier struct{ calls atomic.Int64 }

func (a *countingApplier) ApplyRotation(context.Context, []byte) (bool, error) {
	a.calls.Add(1)
	return false, fmt.Errorf("%w: not a peer", lan.ErrRotationRefused)
}

// POST /v1/rotate has no hop to check before the body: past its rate it answers 429 with
// Retry-After, before reading the body and without reaching the store, until the rate allows again.
func TestRotateRateLimited(t *testing.T) {
	w := newLAN(t, lan.ServerOptions{RotationsPerSecond: 1, RotationBurst: 3})
	a := &countingApplier{}
	w.srv.HandleRotations(a)
	post := func() (int, string) {
		resp, err := http.Post("http://"+w.addr+lan.PathLANRotate, "application/json",
			strings.NewReader(`{"rotation":{"rec":{}}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for i := range 3 {
		if code, _ := post(); code != http.StatusConflict {
			t.Fatalf("call %d within the burst = %d, want 409 from the applier", i+1, code)
		}
	}
	for i := range 5 {
		if code, ra := post(); code != http.StatusTooManyRequests || ra == "" {
			t.Fatalf("call %d past the burst = %d (Retry-After %q), want 429 with Retry-After", i+1, code, ra)
		}
	}
	if n := a.calls.Load(); n != 3 {
		t.Fatalf("the applier saw %d records, want the 3 within the burst", n)
	}
	w.clock.Advance(2 * time.Second) // two more tokens
	for i := range 2 {
		if code, _ := post(); code != http.StatusConflict {
			t.Fatalf("call %d after 2 s = %d, want 409 from the applier", i+1, code)
		}
	}
	if code, _ := post(); code != http.StatusTooManyRequests {
		t.Fatalf("third call after 2 s = %d, want 429", code)
	}
	if n := a.calls.Load(); n != 5 {
		t.Fatalf("the applier saw %d records, want 5", n)
	}
}

// postRotateFrom posts a rotation body to w's /v1/rotate from the loopback address src
// (127.0.0.x: Linux routes the whole 127/8 to lo) and returns the status.
func postRotateFrom(t *testing.T, w *lanWorld, src string) int {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)},
		Timeout: 30 * time.Second}).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := c.Post("http://"+w.addr+lan.PathLANRotate, "application/json", strings.NewReader(`{"rotation":{"rec":{}}}`))
	if err != nil {
		t.Skipf("posting from %s: %v (no second loopback address here)", src, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A stranger that drains POST /v1/rotate's rate leaves other addresses theirs (issue 25, finding
// 7): the limiter has one bucket per client address. Addresses churning through the bounded table
// never reset a bucket that still counts.
func TestRotateRatePerAddress(t *testing.T) {
	t.Parallel()
	w := newLAN(t, lan.ServerOptions{RotationsPerSecond: 1, RotationBurst: 3, RotationAddrs: 4})
	a := &countingApplier{}
	w.srv.HandleRotations(a)
	drain := func(src string) {
		t.Helper()
		for range 3 {
			if code := postRotateFrom(t, w, src); code != http.StatusConflict {
				t.Fatalf("%s within its burst = %d, want 409 from the applier", src, code)
			}
		}
		if code := postRotateFrom(t, w, src); code != http.StatusTooManyRequests {
			t.Fatalf("%s past its burst = %d, want 429", src, code)
		}
	}
	drain("127.0.0.2")
	// The honest peer, at another address, is still served, during the attack and after.
	drain("127.0.0.1")
	// Strangers at more addresses than the table holds: the drained buckets stay drained, the
	// newcomers share one overflow bucket.
	for i := 3; i < 12; i++ {
		postRotateFrom(t, w, fmt.Sprintf("127.0.0.%d", i))
	}
	for _, src := range []string{"127.0.0.1", "127.0.0.2"} {
		if code := postRotateFrom(t, w, src); code != http.StatusTooManyRequests {
			t.Fatalf("%s after the churn = %d, want 429 (its bucket was drained and not reset)", src, code)
		}
	}
	w.clock.Advance(time.Second)
	if code := postRotateFrom(t, w, "127.0.0.1"); code != http.StatusConflict {
		t.Fatalf("the honest peer a second later = %d, want 409 from the applier", code)
	}
}
