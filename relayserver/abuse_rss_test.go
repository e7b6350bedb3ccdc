package relayserver_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// The abuse figures of issue 9 (make abuse prints them; make test asserts them, see abuseRSS):
// attacks on a relay process, measured by its peak RSS.

// holdBody opens a connection to addr, sends a push's header declaring 8 MiB signed by h, then
// up to 8 MiB − 1 of body, and keeps the connection open. It reports the relay's answer on
// answered (0 when none came while the body was being sent).
func holdBody(t *testing.T, addr string, h host, answered chan<- int, conns chan<- net.Conn) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		answered <- -1
		return
	}
	conns <- c
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "POST /v2/relay/items HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", 8<<20)
	for k, v := range mbx.SignRelayHop(h.key, h.name, "POST", "/v2/relay/items", nil, time.Now(), true) {
		fmt.Fprintf(&hdr, "%s: %s\r\n", k, v[0])
	}
	hdr.WriteString("\r\n")
	got := testkit.ReadStatus(c)
	if _, err := c.Write([]byte(hdr.String())); err != nil {
		answered <- <-got
		return
	}
	chunk := bytes.Repeat([]byte{' '}, 64<<10)
	for sent := 0; sent < 8<<20-1; sent += len(chunk) {
		n := min(len(chunk), 8<<20-1-sent)
		if _, err := c.Write(chunk[:n]); err != nil {
			answered <- <-got
			return
		}
		select {
		case code := <-got:
			answered <- code
			return
		default:
		}
	}
	select {
	case code := <-got:
		answered <- code
	case <-time.After(2 * time.Second):
		answered <- 0 // held: the whole body but one byte sent, no answer
	}
}

// TestAbuseRelayHeldBodies: 200 connections of an unenrolled key, then 200 of an enrolled one,
// each declaring 8 MiB and sending all but a byte, then holding; enrolled hosts push and pull
// meanwhile. Measured 97–128 MB (all from one address: two hold 8 MiB, the rest are refused once
// the address's quarter of the body budget is spent); bound 190 MB.
func TestAbuseRelayHeldBodies(t *testing.T) {
	abuseRSS(t)
	dir := t.TempDir()
	c := startChild(t, dir, "")
	defer c.stop()
	a, b, mallory := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "mallory", 66)
	c.enrol(a)
	c.enrol(b)
	base := testkit.ProcKB(t, c.cmd.Process.Pid, "VmRSS")
	addr := strings.TrimPrefix(c.url, "http://")
	conns := make(chan net.Conn, 400)
	for wi, wave := range []struct {
		name string
		h    host
	}{{"unenrolled key", mallory}, {"enrolled key", mallory}} {
		if wave.name == "enrolled key" {
			c.enrol(mallory) // enrolment by host key is free
		}
		answered := make(chan int, 200)
		var wg sync.WaitGroup
		for range 200 {
			wg.Add(1)
			go func() { defer wg.Done(); holdBody(t, addr, wave.h, answered, conns) }()
		}
		wg.Wait()
		close(answered)
		codes := map[int]int{}
		for code := range answered {
			codes[code]++
		}
		// Enrolled hosts are served while the connections are held (one new item a wave: an id
		// pushed before would be answered "duplicate").
		id := fmt.Sprintf("01KKNTQ69NA67N0QBPXKXFN5%02d", wi)
		body := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(id, b)}})
		if code, out, err := c.call(&a, "POST", "/v2/relay/items", body); err != nil || code != 200 || !strings.Contains(string(out), `"accepted"`) {
			t.Errorf("push by an enrolled host during the attack = %d %s %v", code, out, err)
		}
		if p := c.pull(b); len(p.Items) == 0 {
			t.Errorf("pull during the attack found nothing")
		}
		peak := testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")
		t.Logf("abuse: relay, 200 connections of an %s declaring 8 MiB: answers %v (0 = held with 8 MiB-1 sent); "+
			"enrolled hosts served; peak RSS %d MB (at start %d MB)", wave.name, codes, peak>>10, base>>10)
		assertPeak(t, c, 190, "200 connections holding 8 MiB bodies")
	}
	close(conns)
	for cn := range conns {
		cn.Close()
	}
}

// TestAbuseChallengeFlood: 12,000 challenge requests from 400 /64s of one /56 (behind a proxy the
// relay trusts), then a fresh host elsewhere enrols. Peak RSS measured 36 MB; bound 54 MB.
func TestAbuseChallengeFlood(t *testing.T) {
	abuseRSS(t)
	t.Setenv(relayserver.EnvRelayTrustProxy, "xff")
	c := startChild(t, t.TempDir(), "")
	defer c.stop()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: time.Minute}
	post := func(xff, path string, body []byte) (int, []byte) {
		req, _ := http.NewRequest("POST", c.url+path, bytes.NewReader(body))
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := cl.Do(req)
		if err != nil {
			return -1, nil
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		return resp.StatusCode, out.Bytes()
	}
	start := time.Now()
	var ok, limited, other atomic.Int64
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				h := newHost(t, "flood", uint64(5000+i%400))
				xff := fmt.Sprintf("2001:db8:0:ab%02x:%x::%x", (i%400)/2, i%2, i/400+1) // 400 /64s of 2001:db8:0:ab00::/56
				switch code, _ := post(xff, "/v1/relay/challenge", mustJSON(t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()})); code {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	for i := range 12000 {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	flood := time.Since(start)
	fresh := newHost(t, "fresh", 77)
	enrolStart := time.Now()
	code, b := post("2001:db8:77::5", "/v1/relay/challenge", mustJSON(t, mbx.ChallengeRequest{Host: fresh.name, Pubkey: fresh.pub()}))
	if code != 200 {
		t.Fatalf("fresh host's challenge after the flood = %d %s", code, b)
	}
	ch := decode[mbx.ChallengeResponse](t, b)
	req, _ := mbx.SignEnrolment(fresh.key, fresh.name, ch.Challenge, "")
	if code, b := post("2001:db8:77::5", "/v1/relay/enrol", mustJSON(t, req)); code != 200 {
		t.Fatalf("fresh host's enrolment after the flood = %d %s", code, b)
	}
	t.Logf("abuse: relay, 12,000 challenges from 400 /64s of one /56 in %v: %d answered, %d rate-limited (429), %d other; "+
		"a fresh host then enrolled in %v; peak RSS %d MB",
		flood.Round(time.Millisecond), ok.Load(), limited.Load(), other.Load(), time.Since(enrolStart).Round(time.Millisecond),
		testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")>>10)
	if limited.Load() == 0 || other.Load() != 0 {
		t.Errorf("the flood was not rate-limited as it should: %d answered, %d limited, %d other", ok.Load(), limited.Load(), other.Load())
	}
	assertPeak(t, c, 54, "a 12,000-challenge flood")
}
