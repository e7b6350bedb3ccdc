package relayserver_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// Issue 25's abuse figures: attacks by enrolled strangers on a relay process, on loopback, each
// bounded in count and time, measured by the relay's peak RSS (VmHWM) and asserting that honest
// hosts are served during and after. make test runs them (without the race detector, see
// abuseRSS); make abuse prints their figures.

// overBatchSmall is a push body of about size bytes with far more than max_batch small items.
func overBatchSmall(target host, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"kind":"envelope","item_id":"x%07d","targets":[{"host_pubkey":"%s","wire_b64":"e30="}]}`, i, target.pub())
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// bigItems is a push body just under 8 MiB of n items of equal size, whose wires are not
// envelopes (every item is refused once decoded).
func bigItems(t *testing.T, target host, n int) []byte {
	wire := mbx.B64(bytes.Repeat([]byte("x"), (8<<20-64<<10)/n*3/4))
	items := make([]mbx.PushItem, n)
	for i := range items {
		items[i] = mbx.PushItem{Kind: "envelope", ItemID: fmt.Sprintf("big%d", i),
			Targets: []mbx.PushTarget{{HostPubkey: target.pub(), WireB64: wire}}}
	}
	return mustJSON(t, mbx.PushRequest{Items: items})
}

// push sends body signed by h from the client address xff ("" for none) and returns the status
// (-1 when the relay closed the connection before answering, as it may when it refuses a body
// before its end).
func (c *child) pushFrom(h host, xff string, body []byte) int {
	req, err := http.NewRequest("POST", c.url+"/v2/relay/items", bytes.NewReader(body))
	if err != nil {
		return -1
	}
	for k, v := range mbx.SignRelayHop(h.key, h.name, "POST", "/v2/relay/items", body, time.Now(), true) {
		req.Header[k] = v
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// honestPush pushes one envelope from a to b and reports whether it was accepted.
func (c *child) honestPush(a, b host, n int) bool {
	body := mustJSON(c.t, mbx.PushRequest{Items: []mbx.PushItem{envItem(fmt.Sprintf("01KKNTQ69NA67N0QBPX%07d", n), b)}})
	code, out, err := c.call(&a, "POST", "/v2/relay/items", body)
	return err == nil && code == 200 && strings.Contains(string(out), `"accepted"`)
}

// TestAbuseOverBatchPushes (finding 3): seven concurrent 8 MiB pushes at a time, in three waves:
// far more than max_batch small items from one key (the finding), 205 large items from seven keys
// at seven /48s (refused at the 201st, after most of the body), and 200 large items from the same
// seven (within max_batch: decoded, every item refused). An honest host pushes during each wave.
func TestAbuseOverBatchPushes(t *testing.T) {
	abuseRSS(t)
	c := startChild(t, t.TempDir(), "", relayserver.EnvRelayTrustProxy+"=xff")
	defer c.stop()
	a, b, m := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "mallory", 66)
	for _, h := range []host{a, b, m} {
		c.enrol(h)
	}
	var ms []host
	for i := range 7 {
		h := newHost(t, fmt.Sprintf("m%d", i), uint64(200+i))
		c.enrol(h)
		ms = append(ms, h)
	}
	base := testkit.ProcKB(t, c.cmd.Process.Pid, "VmRSS")
	small, over, within := overBatchSmall(m, 8<<20-1024), bigItems(t, m, 205), bigItems(t, m, 200)
	waves := []struct {
		name  string
		body  []byte
		from  func(i int) (host, string)
		codes []int // the attacker's acceptable answers
	}{
		{"7 pushes of 8 MiB, 77k small items, one key", small, func(int) (host, string) { return m, "2001:db8:66::1" }, []int{400, -1}},
		{"7 pushes of 8 MiB, 205 items, 7 keys at 7 /48s", over, func(i int) (host, string) { return ms[i], fmt.Sprintf("2001:db8:%x::1", i+1) }, []int{400, 503, -1}},
		{"7 pushes of 8 MiB, 200 items decoded, 7 keys at 7 /48s", within, func(i int) (host, string) { return ms[i], fmt.Sprintf("2001:db8:%x::1", i+1) }, []int{200, 503}},
	}
	for wi, w := range waves {
		codes := make([]int, 7)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				h, xff := w.from(i)
				codes[i] = c.pushFrom(h, xff, w.body)
			})
		}
		served := c.honestPush(a, b, 10*wi)
		wg.Wait()
		for _, code := range codes {
			if !containsInt(w.codes, code) {
				t.Errorf("%s: attacker answered %v, want only %v", w.name, codes, w.codes)
				break
			}
		}
		if !served || !c.honestPush(a, b, 10*wi+1) {
			t.Errorf("%s: an honest push was not accepted during or after the wave", w.name)
		}
		peak := testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")
		t.Logf("abuse: relay, %s: answers %v; honest pushes accepted; peak RSS so far %d MB (at start %d MB)", w.name, codes, peak>>10, base>>10)
		if wi == 1 {
			// The over-batch waves: measured 106–119 MB (20 MB after the first), on 2 loaded
			// cores; issue 25's goal is under 150 MB (before the fix: 356–504 MB for the first
			// wave alone, 183 MB for the second).
			assertPeak(t, c, 150, "two waves of seven 8 MiB over-batch pushes")
		}
	}
	if p := c.pull(b); len(p.Items) != 2*len(waves) {
		t.Errorf("beta holds %d items, want the %d honest pushes", len(p.Items), 2*len(waves))
	}
	// With the third wave (within max_batch, every item decoded, the bodies and their wires held
	// within the body budget): measured 187–194 MB (228 MB before the fix).
	assertPeak(t, c, 290, "three waves of seven 8 MiB pushes")
}

// TestAbuseHeaderHolders (finding 4): 200 connections from one /56 name an enrolled key, declare
// 8 MiB and send their headers only; then 200 more send 64 KiB of body each and hold. Honest
// pushes from elsewhere are answered throughout.
func TestAbuseHeaderHolders(t *testing.T) {
	abuseRSS(t)
	c := startChild(t, t.TempDir(), "", relayserver.EnvRelayTrustProxy+"=xff")
	defer c.stop()
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	c.enrol(a)
	c.enrol(b)
	addr := strings.TrimPrefix(c.url, "http://")
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	for wave, send := range []int{0, 64 << 10} {
		for i := range 200 {
			cn, err := net.DialTimeout("tcp", addr, ioDeadline)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, cn)
			var hdr strings.Builder
			fmt.Fprintf(&hdr, "POST /v2/relay/items HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", 8<<20)
			fmt.Fprintf(&hdr, "X-Forwarded-For: 2001:db8:0:ab%02x::%x\r\n", i, wave+1) // 200 /64s of one /56
			for k, v := range mbx.SignRelayHop(b.key, b.name, "POST", "/v2/relay/items", nil, time.Now(), true) {
				fmt.Fprintf(&hdr, "%s: %s\r\n", k, v[0])
			}
			hdr.WriteString("\r\n")
			_ = cn.SetWriteDeadline(time.Now().Add(ioDeadline))
			if _, err := cn.Write([]byte(hdr.String())); err != nil {
				t.Fatal(err)
			}
			if send > 0 {
				_, _ = cn.Write(bytes.Repeat([]byte{' '}, send)) // the relay may refuse and close first
			}
		}
		accepted := 0
		for i := range 10 {
			if c.honestPush(a, b, 100*wave+i) {
				accepted++
			}
		}
		if accepted != 10 {
			t.Errorf("wave %d: %d of 10 honest pushes accepted while 200 connections hold", wave, accepted)
		}
		t.Logf("abuse: relay, 200 holders from one /56 naming an enrolled key, %d body bytes each: %d of 10 honest pushes accepted; peak RSS %d MB",
			send, accepted, testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")>>10)
	}
	// Measured 50–51 MB (23 MB after the header-only wave).
	assertPeak(t, c, 75, "400 holders")
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// abuseRSS skips a memory-figure test in a race build: the race detector's shadow memory makes
// peak RSS meaningless there. make test runs these tests a second time without it.
func abuseRSS(t *testing.T) {
	t.Helper()
	if testkit.RaceEnabled {
		t.Skip("memory figures need a build without the race detector: make test runs the TestAbuse tests again without it")
	}
	if testing.Short() {
		t.Skip("child-process abuse test")
	}
}

// assertPeak fails when the child relay's peak RSS passed boundMB.
func assertPeak(t *testing.T, c *child, boundMB int64, what string) {
	t.Helper()
	if peak := testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM") >> 10; peak > boundMB {
		t.Errorf("%s: peak RSS %d MB over the bound of %d MB", what, peak, boundMB)
	}
}
