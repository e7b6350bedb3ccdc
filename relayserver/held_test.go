//go:build linux

package relayserver_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// heldRelay is a relay served through Server.Listener, as relay serve runs it: parked polls are
// held as bare connections; the one timer of all held polls is one of tm's.
func heldRelay(t *testing.T, more func(*relayserver.Options)) (*relay, *timers, host, host, host) {
	tm := newTimers()
	r, a, b, g := setup(t, func(o *relayserver.Options) {
		o.WaitTimer = tm.start
		if more != nil {
			more(o)
		}
	})
	return r, tm, a, b, g
}

// rawClient is one HTTP/1.1 connection to the relay, requests written and answers read by hand,
// so a test sees which connection an answer comes on.
type rawClient struct {
	t    *testing.T
	r    *relay
	conn net.Conn
	br   *bufio.Reader
}

func (r *relay) dial(t *testing.T) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(r.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, r: r, conn: c, br: bufio.NewReader(c)}
}

// request is a pull of path signed by h, as bytes on the wire.
func (c *rawClient) request(h host, path string) []byte {
	c.t.Helper()
	req, err := http.NewRequest("GET", c.r.ts.URL+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range mbx.SignRelayHop(h.key, h.name, "GET", path, nil, c.r.clock.Now(), true) {
		req.Header[k] = v
	}
	var b strings.Builder
	if err := req.Write(&b); err != nil {
		c.t.Fatal(err)
	}
	return []byte(b.String())
}

func (c *rawClient) send(raw []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(raw); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads the next answer on the connection (failing after failsafe).
func (c *rawClient) answer() (*http.Response, []byte) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(failsafe))
	defer c.conn.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("no answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("answer body: %v", err)
	}
	return resp, b
}

// closedByRelay reports whether the relay closed the connection (a read sees EOF).
func (c *rawClient) closedByRelay() bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(failsafe))
	_, err := c.br.ReadByte()
	return err == io.EOF
}

func held(r *relay, n int) func() bool {
	return func() bool { return r.srv.HeldPolls() == n && r.srv.ParkedPulls() == n }
}

// TestHeldPollAnsweredOnPush: a parked poll is held as its bare connection; a push for its key
// answers it with the item on that connection, which then serves the host's next poll (held
// again) as a kept-alive connection does.
func TestHeldPollAnsweredOnPush(t *testing.T) {
	t.Parallel()
	r, tm, a, b, g := heldRelay(t, nil)
	c := r.dial(t)
	c.send(c.request(b, "/v2/relay/items?after=0&wait=20"))
	if ft := tm.parked(t); ft.d != 20*time.Second {
		t.Fatalf("held with a timer of %v, want 20s", ft.d)
	}
	waitFor(t, "the poll held", held(r, 1))
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0G1", g)) // someone else's item wakes nobody
	if n := r.srv.HeldPolls(); n != 1 {
		t.Fatalf("held polls after a push to gamma = %d, want 1", n)
	}
	seq := r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B1", b)).Results[0].Targets[0].Seq
	resp, body := c.answer()
	p := decode[mbx.PullResponse](t, body)
	if resp.StatusCode != 200 || len(p.Items) != 1 || p.Items[0].ItemID != "01KKNTQ2CN9WJ3MR4Q1P12F0B1" || p.LastSeq != seq {
		t.Fatalf("held poll answered %d %s, want the item at seq %d", resp.StatusCode, body, seq)
	}
	if resp.Header.Get(relayserver.HeaderRequestID) == "" || resp.Header.Get("Content-Type") != "application/json" || resp.Close {
		t.Fatalf("answer headers %v, want a request id, JSON and the connection kept", resp.Header)
	}
	if n := r.srv.ParkedPulls(); n != 0 {
		t.Fatalf("parked pulls after the answer = %d", n)
	}
	// The same connection carries the next poll, held again and woken again.
	c.send(c.request(b, "/v2/relay/items?after="+strconv.FormatInt(seq, 10)+"&wait=20"))
	waitFor(t, "the next poll held on the same connection", held(r, 1))
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B2", b))
	if _, body := c.answer(); !strings.Contains(string(body), "01KKNTQ2CN9WJ3MR4Q1P12F0B2") {
		t.Fatalf("second answer %s", body)
	}
}

// TestHeldPollTimeout: when the wait passes, a held poll gets an empty page without a hint, and
// its connection serves the next request.
func TestHeldPollTimeout(t *testing.T) {
	t.Parallel()
	r, tm, _, b, _ := heldRelay(t, nil)
	c := r.dial(t)
	c.send(c.request(b, "/v2/relay/items?after=0&wait=30"))
	ft := tm.parked(t)
	waitFor(t, "the poll held", held(r, 1))
	ft.fire()
	resp, body := c.answer()
	if p := decode[mbx.PullResponse](t, body); resp.StatusCode != 200 || len(p.Items) != 0 || p.Epoch == "" || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("poll whose wait passed = %d %s (Retry-After %q), want an empty page without a hint", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if n := r.srv.ParkedPulls(); n != 0 {
		t.Fatalf("parked pulls after the timeout = %d", n)
	}
	c.send(c.request(b, "/v2/relay/items?after=0"))
	if resp, body := c.answer(); resp.StatusCode != 200 {
		t.Fatalf("next request on the connection = %d %s", resp.StatusCode, body)
	}
}

// TestHeldPollClientGone: a client that closes its connection while held frees the poll's place
// at once; one that sends anything while held (its next request before this answer) loses the
// connection.
func TestHeldPollClientGone(t *testing.T) {
	t.Parallel()
	r, tm, a, b, _ := heldRelay(t, func(o *relayserver.Options) { o.MaxWaiting = 1 })
	c := r.dial(t)
	c.send(c.request(b, "/v2/relay/items?after=0&wait=30"))
	tm.parked(t)
	waitFor(t, "the poll held", held(r, 1))
	c.conn.Close()
	waitFor(t, "the poll of a closed connection freed", held(r, 0))
	// Its place is free: another poll is held (the cap is 1), and a push still commits.
	c2 := r.dial(t)
	c2.send(c2.request(a, "/v2/relay/items?after=0&wait=30"))
	waitFor(t, "a new poll held", held(r, 1))
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0C1", b))
	// Bytes sent while held (a host waiting for its answer sends none): the connection is closed.
	c2.send(c2.request(a, "/v2/relay/items?after=0"))
	_ = c2.conn.SetReadDeadline(time.Now().Add(failsafe))
	if _, err := c2.br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection stayed open after bytes sent while held (%v)", err)
	}
	waitFor(t, "nothing held", held(r, 0))
}

// TestHeldPollCapAndShutdown: past the cap a poll is answered at once with Retry-After: 10;
// at shutdown a held poll is answered with Retry-After: 5 and its connection closed, and
// Shutdown returns after that answer.
func TestHeldPollCapAndShutdown(t *testing.T) {
	t.Parallel()
	r, tm, _, b, g := heldRelay(t, func(o *relayserver.Options) { o.MaxWaiting = 1 })
	c := r.dial(t)
	c.send(c.request(b, "/v2/relay/items?after=0&wait=30"))
	tm.parked(t)
	waitFor(t, "the poll held", held(r, 1))
	c2 := r.dial(t)
	c2.send(c2.request(g, "/v2/relay/items?after=0&wait=30"))
	if resp, body := c2.answer(); resp.StatusCode != 200 || resp.Header.Get("Retry-After") != "10" || strings.Contains(string(body), `"seq"`) {
		t.Fatalf("poll over the cap = %d %s (Retry-After %q), want an empty page with Retry-After 10", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	r.srv.Shutdown()
	if n := r.srv.HeldPolls(); n != 0 {
		t.Fatalf("held polls after Shutdown = %d", n)
	}
	resp, body := c.answer()
	if resp.StatusCode != 200 || resp.Header.Get("Retry-After") != "5" || !resp.Close {
		t.Fatalf("held poll at shutdown = %d %s (Retry-After %q, close %v)", resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Close)
	}
	if !c.closedByRelay() {
		t.Fatal("the connection stayed open after the shutdown answer")
	}
}

// TestParkedCapPerAddress: one client address holds at most its share of the parked polls; past
// it a poll gets the documented answer (an empty page, Retry-After: 10) though the relay has room.
func TestParkedCapPerAddress(t *testing.T) {
	t.Parallel()
	r, tm, a, b, g := heldRelay(t, func(o *relayserver.Options) { o.MaxWaiting, o.MaxWaitingPerClient = 100, 2 })
	ca, cb, cg := r.dial(t), r.dial(t), r.dial(t)
	ca.send(ca.request(a, "/v2/relay/items?after=0&wait=30"))
	tm.parked(t)
	cb.send(cb.request(b, "/v2/relay/items?after=0&wait=30"))
	waitFor(t, "two polls held", held(r, 2))
	cg.send(cg.request(g, "/v2/relay/items?after=0&wait=30"))
	if resp, body := cg.answer(); resp.StatusCode != 200 || resp.Header.Get("Retry-After") != "10" || strings.Contains(string(body), `"seq"`) {
		t.Fatalf("third poll from one address = %d %s (Retry-After %q), want an empty page with Retry-After 10", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	// A poll that ends gives its address's place back.
	r.push(g, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0D1", a))
	if _, body := ca.answer(); !strings.Contains(string(body), "01KKNTQ2CN9WJ3MR4Q1P12F0D1") {
		t.Fatalf("woken poll = %s", body)
	}
	cg.send(cg.request(g, "/v2/relay/items?after=0&wait=30"))
	waitFor(t, "gamma's poll held in the place alpha's left", held(r, 2))
}

func TestParkedCapFromMemory(t *testing.T) {
	for _, c := range []struct {
		mem  int64
		want int
	}{
		{0, relayserver.DefaultMaxWaiting},
		{256 << 20, 4096},    // a quarter of 256 MiB at 16 KiB
		{16 << 20, 1024},     // never under 1,024
		{24 << 30, 393216},   // this machine
		{1 << 50, 1_000_000}, // never over 1,000,000
	} {
		if got := relayserver.ParkedCapFor(c.mem); got != c.want {
			t.Errorf("ParkedCapFor(%d) = %d, want %d", c.mem, got, c.want)
		}
	}
	if got := relayserver.NoFileShortfall(1024, 4096); got != 4096+relayserver.FDHeadroom {
		t.Errorf("limit 1024 for 4096 parked: need %d, want %d", got, 4096+relayserver.FDHeadroom)
	}
	if got := relayserver.NoFileShortfall(65536, 4096); got != 0 {
		t.Errorf("limit 65536 for 4096 parked: need %d, want 0", got)
	}
	if got := relayserver.NoFileShortfall(0, 4096); got != 0 {
		t.Errorf("an unknown limit: need %d, want 0 (no warning)", got)
	}
}
