package relayserver_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// The adversarial suite (docs/design.md: Quotas and bounds): every attack is a bounded loop on
// loopback that stops by itself, and each test asserts the attack is refused or bounded while
// legitimate hosts are served during and after it. No assertion depends on wall-clock time; deadlines only stop a
// broken test from hanging.

const ioDeadline = 30 * time.Second

// holder is a raw connection that sent a request's headers (and perhaps part of its body) and
// holds it open.
type holder struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

// hold opens a connection to the relay and sends the header of a POST to path declaring length
// body bytes (chunked when length < 0), signed as a hop of h at now when h is not nil (the
// signature covers an empty body, which is beside the point: the body never arrives).
func (r *relay) hold(t *testing.T, h *host, path string, length int64, xff string) *holder {
	t.Helper()
	conn, err := net.Dial("tcp", r.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n", path)
	if length >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", length)
	} else {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if xff != "" {
		fmt.Fprintf(&b, "X-Forwarded-For: %s\r\n", xff)
	}
	if h != nil {
		for k, v := range mbx.SignRelayHop(h.key, h.name, "POST", path, nil, r.clock.Now(), true) {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v[0])
		}
	}
	b.WriteString("\r\n")
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	return &holder{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// answer reads the response the relay sent without waiting for the body.
func (c *holder) answer() *http.Response {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(ioDeadline))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("no answer before the body: %v", err)
	}
	resp.Body.Close()
	return resp
}

// send writes n filler bytes of the body.
func (c *holder) send(n int) {
	c.t.Helper()
	if _, err := c.conn.Write([]byte(strings.Repeat(" ", n))); err != nil {
		c.t.Fatal(err)
	}
}

// waitFor polls cond until it holds (the relay works on another goroutine), failing after a
// generous bound of tries.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("never: %s", what)
}

// Finding 1: an unknown key, a stale timestamp or a malformed key is answered from the headers;
// the relay never waits for the 8 MiB the request declares.
func TestHopHeadersCheckedBeforeTheBody(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	stranger := newHost(t, "mallory", 66)
	if c := r.hold(t, &stranger, "/v2/relay/items", 8<<20-1, "").answer(); c.StatusCode != 401 {
		t.Fatalf("unenrolled key = %d, want 401 before the body", c.StatusCode)
	}
	stale := *r
	stale.clock = testkit.NewClock(t0.Add(-time.Hour))
	if c := stale.hold(t, &a, "/v2/relay/items", 8<<20-1, "").answer(); c.StatusCode != 401 {
		t.Fatalf("stale hop = %d, want 401 before the body", c.StatusCode)
	}
	far := *r
	far.clock = testkit.NewClock(t0.AddDate(400, 0, 0))
	if c := far.hold(t, &a, "/v2/relay/items", 100, "").answer(); c.StatusCode != 401 {
		t.Fatalf("hop dated four centuries ahead = %d, want 401", c.StatusCode)
	}
	if c := r.hold(t, nil, "/v2/relay/items", 8<<20-1, "").answer(); c.StatusCode != 401 {
		t.Fatalf("no hop headers = %d, want 401", c.StatusCode)
	}
	if c := r.hold(t, nil, "/v2/relay/items", 8<<20+1, "").answer(); c.StatusCode != 401 && c.StatusCode != 413 {
		t.Fatalf("over the cap = %d, want 401 or 413", c.StatusCode)
	}
	if got := r.srv.BodyBytesInFlight(); got != 0 {
		t.Fatalf("refused requests hold %d budget bytes", got)
	}
	if st := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))); st[0] != "accepted" {
		t.Fatalf("legitimate push = %v", st)
	}
}

// Finding 1: declared lengths count against the relay-wide budget before anything is read; past
// it requests get 503 with Retry-After, small requests keep a reserve, and everything comes back
// when the holders go.
func TestBodyBudgetRefusesBeforeReading(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.BodyBudget = 1 << 20
		o.TrustProxy = relayserver.TrustXFF
	})
	// Holders from many addresses, each declaring 250 KiB: three fit under 7/8 of 1 MiB.
	var held []*holder
	for i := range 3 {
		held = append(held, r.hold(t, &a, "/v2/relay/items", 250<<10, fmt.Sprintf("198.51.100.%d", i)))
	}
	waitFor(t, "three holders reserved", func() bool { return r.srv.BodyBytesInFlight() == 3*250<<10 })
	over := r.hold(t, &a, "/v2/relay/items", 250<<10, "198.51.100.9").answer()
	if over.StatusCode != 503 || over.Header.Get("Retry-After") == "" {
		t.Fatalf("over the budget = %d Retry-After %q, want 503 with Retry-After", over.StatusCode, over.Header.Get("Retry-After"))
	}
	// A small push and an ack still fit in the reserve.
	if st := statuses(r.push(b, envItem("01KKNTQ69NA67N0QBPXKXFN502", a))); st[0] != "accepted" {
		t.Fatalf("small push while the budget is held = %v", st)
	}
	head := r.pull(a, 0).HeadSeq
	if code, out := r.call(&a, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: head})); code != 200 {
		t.Fatalf("ack while the budget is held = %d %s", code, out)
	}
	for _, h := range held {
		h.conn.Close()
	}
	waitFor(t, "budget returned", func() bool { return r.srv.BodyBytesInFlight() == 0 })
	if st := statuses(r.push(b, envItem("01KKNTQ69NA67N0QBPXKXFN503", a))); st[0] != "accepted" {
		t.Fatalf("push after the holders left = %v", st)
	}
}

// Finding 1: a body of undeclared length is charged as its buffer grows, and refused once the
// budget is spent.
func TestChunkedBodyChargedAsItGrows(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) { o.BodyBudget = 256 << 10 })
	h := r.hold(t, &a, "/v2/relay/items", -1, "")
	chunk := strings.Repeat(" ", 32<<10)
	var resp *http.Response
	for i := 0; i < 64 && resp == nil; i++ { // 2 MiB at most
		if _, err := fmt.Fprintf(h.conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
			resp = h.answer() // the relay answered and closed
			break
		}
		_ = h.conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := h.br.Peek(1); err == nil {
			resp = h.answer()
		}
	}
	if resp == nil || resp.StatusCode != 503 {
		t.Fatalf("chunked body past the budget = %v, want 503", resp)
	}
	waitFor(t, "budget returned", func() bool { return r.srv.BodyBytesInFlight() == 0 })
	if st := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN504", b))); st[0] != "accepted" {
		t.Fatalf("push after = %v", st)
	}
}

// Finding 1: one client address may hold only so many requests in flight; another is served.
func TestRequestsInFlightPerAddress(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.MaxPerClient = 2
		o.TrustProxy = relayserver.TrustXFF
	})
	r.hold(t, &a, "/v2/relay/items", 1000, "2001:db8:1:1::1")
	r.hold(t, &a, "/v2/relay/items", 1000, "2001:db8:1:1::2") // the same /64
	waitFor(t, "two holders reserved", func() bool { return r.srv.BodyBytesInFlight() == 2000 })
	third := r.hold(t, &a, "/v2/relay/items", 1000, "2001:db8:1:1::3").answer()
	if third.StatusCode != 503 || third.Header.Get("Retry-After") == "" {
		t.Fatalf("third request of the /64 = %d, want 503 with Retry-After", third.StatusCode)
	}
	if st := statuses(r.push(b, envItem("01KKNTQ69NA67N0QBPXKXFN505", a))); st[0] != "accepted" {
		t.Fatalf("push from another address = %v", st)
	}
}

// Finding 1: a sender allowlist has a small cap of its own.
func TestSendersBodyCap(t *testing.T) {
	t.Parallel()
	r, a, _, _ := setup(t, nil)
	body := `{"list":{"pad":"` + strings.Repeat("x", 100<<10) + `"},"sig":""}`
	if code, _ := r.call(&a, "POST", "/v2/relay/senders", []byte(body)); code != 413 {
		t.Fatalf("100 KiB allowlist = %d, want 413", code)
	}
	c := r.hold(t, &a, "/v2/relay/senders", 1<<20, "").answer()
	if c.StatusCode != 413 {
		t.Fatalf("1 MiB declared allowlist = %d, want 413 before the body", c.StatusCode)
	}
}
