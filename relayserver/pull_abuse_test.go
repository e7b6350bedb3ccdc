package relayserver_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// The slow-reader attack on pulls (issue 25, finding 1), bounded and in process: enrolled keys
// with large queues open pulls and read nothing. Each test asserts the bound and that an honest
// host is served during and after the attack.

// tightListener makes every accepted connection's send buffer small, so a client that reads
// nothing blocks the relay's writes after a few kilobytes, not after megabytes of kernel buffer.
type tightListener struct{ net.Listener }

func (l tightListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// tightServer serves r's relay on a second loopback listener with small send buffers and
// returns its address.
func tightServer(t *testing.T, r *relay) string {
	ts := httptest.NewUnstartedServer(r.srv)
	ts.Listener = tightListener{ts.Listener}
	ts.Start()
	t.Cleanup(func() {
		r.srv.Shutdown()
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts.Listener.Addr().String()
}

// The pulls here read chunks of 128 KiB (Options.PullChunk) of items of about 100 KiB: small
// enough to be quick under the race detector, large enough that a stalled reader blocks the relay.
const (
	testChunk    = 128 << 10
	testItemSize = 100 << 10
)

// slowPullRelay is a relay whose pulls read testChunk at a time, and items up to testChunk.
func slowPullRelay(t *testing.T, more func(*relayserver.Options)) (*relay, host, host) {
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.PullChunk = testChunk
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxItemBytes = testChunk
		if more != nil {
			more(o)
		}
	})
	return r, a, b
}

// fillSelf queues n items of about testItemSize from h to itself.
func fillSelf(t *testing.T, r *relay, h host, n int) {
	t.Helper()
	pad := strings.Repeat("A", testItemSize)
	for i := 0; i < n; i += 8 {
		var items []mbx.PushItem
		for j := i; j < min(n, i+8); j++ {
			id := fmt.Sprintf("01KKNTQ69NA67N0QBPXK%06d", j)
			items = append(items, mbx.PushItem{Kind: "envelope", ItemID: id,
				Targets: []mbx.PushTarget{{HostPubkey: h.pub(), WireB64: mbx.B64(envWire(id, pad))}}})
		}
		if got := statuses(r.push(h, items...)); strings.Count(strings.Join(got, ","), "accepted") != len(items) {
			t.Fatalf("filling %s's queue: %v", h.name, got)
		}
	}
}

// stalledPull is a pull whose client reads nothing until told to.
type stalledPull struct {
	t *testing.T
	c net.Conn
}

func (r *relay) slowPullOf(t *testing.T, addr string, h host) *stalledPull {
	t.Helper()
	return r.slowPullFrom(t, addr, h, "")
}

// slowPullFrom is slowPullOf from the client address xff (the relay trusts X-Forwarded-For).
func (r *relay) slowPullFrom(t *testing.T, addr string, h host, xff string) *stalledPull {
	t.Helper()
	c, err := slowPull(addr, h, r.clock.Now(), xff)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &stalledPull{t: t, c: c}
}

// drain reads the whole answer and returns its status and page; err is what cut it short.
func (s *stalledPull) drain() (int, mbx.PullResponse, error) {
	_ = s.c.SetReadDeadline(time.Now().Add(ioDeadline))
	resp, err := http.ReadResponse(bufio.NewReader(s.c), nil)
	if err != nil {
		return 0, mbx.PullResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, mbx.PullResponse{}, err
	}
	var p mbx.PullResponse
	if resp.StatusCode == 200 {
		err = json.Unmarshal(b, &p)
	}
	return resp.StatusCode, p, err
}

// honestServed checks that an honest host's push is accepted and its pull brings it.
func honestServed(t *testing.T, r *relay, a, b host, id string) {
	t.Helper()
	if got := statuses(r.push(a, envItem(id, b))); len(got) != 1 || got[0] != "accepted" {
		t.Fatalf("honest push = %v", got)
	}
	p := r.pull(b, 0)
	if len(p.Items) == 0 || p.Items[len(p.Items)-1].ItemID != id {
		t.Fatalf("honest pull = %v, want %s last", ids(p), id)
	}
}

// TestSlowPullsOneKey: a key that opens a third slow pull ends its oldest; the relay holds at
// most a chunk for each of the two left, and the ended pull's client sees a broken answer, never
// a short page. The two left, once read, are whole pages.
func TestSlowPullsOneKey(t *testing.T) {
	t.Parallel()
	r, a, b := slowPullRelay(t, nil)
	m := newHost(t, "mallory", 66)
	r.enrol(m)
	fillSelf(t, r, m, 4)
	addr := tightServer(t, r)
	first := r.slowPullOf(t, addr, m)
	waitFor(t, "the first slow pull to block", func() bool { return r.srv.PullsInFlight() == 1 })
	second := r.slowPullOf(t, addr, m)
	waitFor(t, "the second slow pull to block", func() bool { return r.srv.PullsInFlight() == 2 })
	third := r.slowPullOf(t, addr, m)
	waitFor(t, "the third pull to end the first", func() bool { return r.srv.PullsEnded() == 1 })
	waitFor(t, "two answers in flight", func() bool { return r.srv.PullsInFlight() == 2 })
	if held := r.srv.ResponseBytesInFlight(); held > 2*testChunk {
		t.Fatalf("the relay holds %d bytes for two slow pulls, want at most a chunk each", held)
	}
	honestServed(t, r, a, b, "01KKNTQ2CN9WJ3MR4Q1P12F0J1")
	if _, p, err := first.drain(); err == nil {
		t.Fatalf("the ended pull read a whole answer (%d items), want it cut off", len(p.Items))
	}
	for i, s := range []*stalledPull{second, third} {
		code, p, err := s.drain()
		if err != nil || code != 200 || len(p.Items) != 4 || p.More || p.LastSeq != p.Items[3].Seq {
			t.Fatalf("slow pull %d, read at last = %d, %d items, more %v, %v; want the whole page", i+2, code, len(p.Items), p.More, err)
		}
	}
	waitFor(t, "no answer in flight", func() bool { return r.srv.PullsInFlight() == 0 && r.srv.ResponseBytesInFlight() == 0 })
}

// TestSlowPullsOneAddress: past MaxPullsPerClient answers in flight from one address, a pull
// with items gets 503 with Retry-After before anything of its page is written; an empty pull
// (nothing to write) is still answered, and the address is served again once the slow pulls end.
func TestSlowPullsOneAddress(t *testing.T) {
	t.Parallel()
	r, a, b := slowPullRelay(t, func(o *relayserver.Options) { o.MaxPullsPerClient = 2 })
	ms := []host{newHost(t, "m1", 71), newHost(t, "m2", 72), newHost(t, "m3", 73)}
	for _, m := range ms {
		r.enrol(m)
		fillSelf(t, r, m, 2)
	}
	addr := tightServer(t, r)
	var slow []*stalledPull
	for i, m := range ms[:2] {
		slow = append(slow, r.slowPullOf(t, addr, m))
		waitFor(t, "a slow pull to block", func() bool { return r.srv.PullsInFlight() == i+1 })
	}
	got := callHeaders(bg, r.ts.URL, &ms[2], r.clock.Now(), "GET", "/v2/relay/items?after=0", nil)
	if got.err != nil || got.code != http.StatusServiceUnavailable || got.hdr.Get("Retry-After") == "" {
		t.Fatalf("third address pull = %d %s %v (Retry-After %q), want 503 with Retry-After", got.code, got.body, got.err, got.hdr.Get("Retry-After"))
	}
	// Beta has nothing queued: an empty page takes no slot. Alpha's push is served.
	if p := r.pull(b, 0); len(p.Items) != 0 {
		t.Fatalf("beta's pull = %v", ids(p))
	}
	if got := statuses(r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0K1", b))); got[0] != "accepted" {
		t.Fatalf("push during the attack = %v", got)
	}
	for _, s := range slow {
		if code, p, err := s.drain(); err != nil || code != 200 || len(p.Items) != 2 {
			t.Fatalf("slow pull read at last = %d, %d items, %v", code, len(p.Items), err)
		}
	}
	waitFor(t, "no answer in flight", func() bool { return r.srv.PullsInFlight() == 0 })
	if p := r.pull(ms[2], 0); len(p.Items) != 2 {
		t.Fatalf("m3's pull after the attack = %d items, want 2", len(p.Items))
	}
	honestServed(t, r, a, b, "01KKNTQ2CN9WJ3MR4Q1P12F0K2")
}

// TestSlowPullsResponseBudget: slow pulls take the relay's response budget (here 1 MiB) and no
// more. One client address may hold a quarter of it: its third slow pull gets 503 while the same
// key from another address is served. Across addresses, large answers may hold seven eighths:
// past that a pull of large items gets 503, while an honest host with small mail is served from
// the reserve.
func TestSlowPullsResponseBudget(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	r, a, b := slowPullRelay(t, func(o *relayserver.Options) {
		o.ResponseBudget, o.MaxPullsPerClient, o.TrustProxy = budget, 100, relayserver.TrustXFF
	})
	var ms []host
	for i := range 9 {
		m := newHost(t, fmt.Sprintf("m%d", i), uint64(80+i))
		r.enrol(m)
		fillSelf(t, r, m, 2)
		ms = append(ms, m)
	}
	addr := tightServer(t, r)
	blocked := 0
	stall := func(m host, xff string) {
		t.Helper()
		r.slowPullFrom(t, addr, m, xff)
		blocked++
		waitFor(t, "a slow pull to block", func() bool { return r.srv.PullsInFlight() == blocked })
	}
	refused := func(m host, xff string) {
		t.Helper()
		c, err := slowPull(addr, m, r.clock.Now(), xff)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code, _, err := (&stalledPull{t: t, c: c}).drain(); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("pull of large items from %s past its budget = %d %v, want 503", xff, code, err)
		}
	}
	// One address: two chunks of 128 KiB are its quarter of the budget.
	stall(ms[0], "192.0.2.1")
	stall(ms[1], "192.0.2.1")
	refused(ms[2], "192.0.2.1")
	stall(ms[2], "192.0.2.2")
	// Across addresses: seven chunks in all, then no more.
	for i := 3; i < 7; i++ {
		stall(ms[i], fmt.Sprintf("192.0.2.%d", i))
	}
	if held := r.srv.ResponseBytesInFlight(); held > budget*7/8 {
		t.Fatalf("response bytes in flight %d over seven eighths of the budget %d", held, budget)
	}
	refused(ms[7], "192.0.2.7")
	refused(ms[8], "192.0.2.8")
	honestServed(t, r, a, b, "01KKNTQ2CN9WJ3MR4Q1P12F0L1")
	if held := r.srv.ResponseBytesInFlight(); held > budget*7/8 {
		t.Fatalf("response bytes in flight %d over seven eighths of the budget %d", held, budget)
	}
}

// TestSlowPullWriteDeadline: a pull whose client reads nothing is ended when its chunk's write
// deadline passes (here a grace of a second at a high minimum rate), which frees its slot and its
// budget; the host's next pull gets the whole page.
func TestSlowPullWriteDeadline(t *testing.T) {
	t.Parallel()
	r, a, b := slowPullRelay(t, func(o *relayserver.Options) {
		o.PullWriteGrace, o.PullMinRate = time.Second, 1<<30
	})
	m := newHost(t, "mallory", 66)
	r.enrol(m)
	fillSelf(t, r, m, 3)
	addr := tightServer(t, r)
	s := r.slowPullOf(t, addr, m)
	waitFor(t, "the slow pull to block", func() bool { return r.srv.PullsInFlight() == 1 })
	waitFor(t, "the write deadline to end it", func() bool {
		return r.srv.PullsInFlight() == 0 && r.srv.ResponseBytesInFlight() == 0
	})
	if _, p, err := s.drain(); err == nil {
		t.Fatalf("the pull past its deadline read a whole answer (%d items), want it cut off", len(p.Items))
	}
	if p := r.pull(m, 0); len(p.Items) != 3 {
		t.Fatalf("mallory's next pull = %d items, want 3", len(p.Items))
	}
	honestServed(t, r, a, b, "01KKNTQ2CN9WJ3MR4Q1P12F0M1")
}
