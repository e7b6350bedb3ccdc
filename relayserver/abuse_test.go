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

// trySend writes n filler bytes of the body, or as many as the relay reads before it answers and
// closes.
func (c *holder) trySend(n int) {
	_ = c.conn.SetWriteDeadline(time.Now().Add(ioDeadline))
	_, _ = c.conn.Write([]byte(strings.Repeat(" ", n)))
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

// Finding 1 (issue 25 finding 4): a request holds budget only for the bytes that arrived, never
// for its declared length, and within the shares of its client address and of the key it names:
// header-only holders hold nothing, one address or requests naming one key cannot spend the
// budget, small requests keep a reserve, and everything comes back when the holders go.
func TestBodyBudgetHoldsOnlyWhatArrived(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.BodyBudget = 1 << 20 // shares: 256 KiB an address or a named key
		o.TrustProxy = relayserver.TrustXFF
		o.MaxPerClient = 100
	})
	// Fifty holders naming b, each declaring 8 MiB, send their headers only: nothing is held.
	for range 50 {
		r.hold(t, &b, "/v2/relay/items", 8<<20-1, "198.51.100.7")
	}
	waitFor(t, "the holders in flight", func() bool { return r.srv.RequestsInFlight("198.51.100.7") == 50 })
	if got := r.srv.BodyBytesInFlight(); got != 0 {
		t.Fatalf("header-only holders hold %d budget bytes", got)
	}
	if st := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN502", b))); st[0] != "accepted" {
		t.Fatalf("push while header-only holders wait = %v", st)
	}
	// Bytes that arrive are charged, within the address's share: a second body of the same
	// address is refused once it would pass the share, and says when to retry.
	h := r.hold(t, &b, "/v2/relay/items", 8<<20-1, "198.51.100.8")
	h.send(200 << 10)
	waitFor(t, "200 KiB charged", func() bool { return r.srv.BodyShareInFlight("addr 198.51.100.8") >= 200<<10 })
	over := r.hold(t, &b, "/v2/relay/items", 8<<20-1, "198.51.100.8")
	over.trySend(200 << 10)
	if resp := over.answer(); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the address's share = %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Requests naming b from other addresses share b's quarter: past it they are refused too.
	other := r.hold(t, &b, "/v2/relay/items", 8<<20-1, "198.51.100.9")
	other.trySend(200 << 10)
	if resp := other.answer(); resp.StatusCode != 503 {
		t.Fatalf("past the named key's share = %d, want 503", resp.StatusCode)
	}
	if got := r.srv.BodyShareInFlight("key " + b.pub()); got > 256<<10 {
		t.Fatalf("requests naming b hold %d, over their share", got)
	}
	// Everyone else is served meanwhile: a push and an ack from a (another key, another address).
	if st := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN503", b))); st[0] != "accepted" {
		t.Fatalf("push while the shares are held = %v", st)
	}
	head := r.pull(a, 0).HeadSeq
	if code, out := r.call(&a, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: head})); code != 200 {
		t.Fatalf("ack while the shares are held = %d %s", code, out)
	}
	h.conn.Close()
	waitFor(t, "budget returned", func() bool { return r.srv.BodyBytesInFlight() == 0 })
	if st := statuses(r.push(b, envItem("01KKNTQ69NA67N0QBPXKXFN504", a))); st[0] != "accepted" {
		t.Fatalf("b's push after the holders left = %v", st)
	}
}

// The reserve: bodies past SmallBody leave the last eighth of the budget to small requests.
func TestBodyBudgetReserveForSmallBodies(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.BodyBudget = 1 << 20
		o.TrustProxy = relayserver.TrustXFF
	})
	// Seven hosts at seven addresses send 120 KiB each (128 KiB charged): 7/8 of the budget.
	var held []*holder
	for i := range 7 {
		hi := newHost(t, fmt.Sprintf("h%d", i), uint64(100+i))
		r.enrol(hi)
		h := r.hold(t, &hi, "/v2/relay/items", 8<<20-1, fmt.Sprintf("2001:db8:%d::1", i+1))
		h.send(120 << 10)
		held = append(held, h)
	}
	waitFor(t, "7/8 of the budget held", func() bool { return r.srv.BodyBytesInFlight() >= 7*(128<<10)-7*512 })
	big := r.hold(t, &a, "/v2/relay/items", 8<<20-1, "2001:db8:99::1")
	big.trySend(100 << 10)
	if resp := big.answer(); resp.StatusCode != 503 {
		t.Fatalf("a large body into the reserve = %d, want 503", resp.StatusCode)
	}
	if st := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN505", b))); st[0] != "accepted" {
		t.Fatalf("small push while 7/8 is held = %v", st)
	}
	for _, h := range held {
		h.conn.Close()
	}
	waitFor(t, "budget returned", func() bool { return r.srv.BodyBytesInFlight() == 0 })
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
	waitFor(t, "two holders in flight", func() bool { return r.srv.RequestsInFlight("2001:db8:1:1::/64") == 2 })
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

// Issue 25 finding 3: a push is counted as it arrives and refused at max_batch + 1 items (or
// max_targets + 1 targets), before the rest of the body is read and before anything is decoded.
// The attacker's connection sends the first items and then waits: the answer comes anyway.
func TestPushOverBatchRefusedBeforeTheRest(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxBatch, o.Limits.MaxTargets = 5, 3
	})
	item := func(i, targets int) string {
		var ts []string
		for range targets {
			ts = append(ts, fmt.Sprintf(`{"host_pubkey":%q,"wire_b64":"e30="}`, b.pub()))
		}
		return fmt.Sprintf(`{"kind":"envelope","item_id":"x%d","targets":[%s]}`, i, strings.Join(ts, ","))
	}
	for _, c := range []struct {
		what, path, prefix string
		want               int
	}{
		{"six items", "/v2/relay/items", `{"items":[` + item(0, 1) + "," + item(1, 1) + "," + item(2, 1) + "," +
			item(3, 1) + "," + item(4, 1) + "," + item(5, 1), 400},
		{"four targets", "/v2/relay/items", `{"items":[` + item(0, 4), 400},
		{"six v1 envelopes", "/v1/relay/messages", `{"envelopes":[{},{},{},{},{},{}`, 413},
	} {
		h := r.hold(t, &a, c.path, 8<<20-1, "")
		if _, err := h.conn.Write([]byte(c.prefix)); err != nil {
			t.Fatal(err)
		}
		// The rest of the declared 8 MiB never comes.
		if resp := h.answer(); resp.StatusCode != c.want {
			t.Fatalf("%s: %d, want %d before the rest of the body", c.what, resp.StatusCode, c.want)
		}
	}
	waitFor(t, "budget returned", func() bool { return r.srv.BodyBytesInFlight() == 0 })
	// A push at the limits is taken; an honest host is served after the attempts.
	items := make([]mbx.PushItem, 5)
	for i := range items {
		items[i] = envItem(fmt.Sprintf("01KKNTQ69NA67N0QBPXKXFN5%02d", i), b)
	}
	if st := statuses(r.push(a, items...)); len(st) != 5 || st[4] != "accepted" {
		t.Fatalf("push of max_batch items = %v", st)
	}
}
