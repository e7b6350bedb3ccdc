package relayserver_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

// slowDial opens a connection to addr whose receive buffer is a few kilobytes, set before the
// connection is made, so the relay's answer backs up in the relay rather than in this process.
func slowDial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: ioDeadline, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return d.Dial("tcp", addr)
}

// slowPull opens a connection to addr and sends a pull of the largest page signed by h at now
// (with X-Forwarded-For xff when it is not empty), then reads nothing: the slow reader of issue
// 25.
func slowPull(addr string, h host, now time.Time, xff string) (net.Conn, error) {
	c, err := slowDial(addr)
	if err != nil {
		return nil, err
	}
	path := fmt.Sprintf("/v2/relay/items?after=0&limit=%d", mbx.DefaultMaxPull)
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: relay\r\n", path)
	if xff != "" {
		fmt.Fprintf(&b, "X-Forwarded-For: %s\r\n", xff)
	}
	for k, v := range mbx.SignRelayHop(h.key, h.name, "GET", path, nil, now, true) {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v[0])
	}
	b.WriteString("\r\n")
	if _, err := c.Write([]byte(b.String())); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// slowStatus reads the status line of what a slow pull got so far (-1 when nothing came, or the
// connection was closed first), without reading the body.
func slowStatus(c net.Conn) int {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 256), nil)
	if err != nil {
		return -1
	}
	return resp.StatusCode
}

// fillOwnQueue pushes items of about 500 KiB from h to itself until its queue holds about
// total bytes.
func fillOwnQueue(t *testing.T, c *child, h host, total int) {
	t.Helper()
	pad := strings.Repeat("A", 500<<10)
	n := 0
	for sent := 0; sent < total; {
		var items []mbx.PushItem
		for range 10 {
			id := fmt.Sprintf("01KKNTQ69NA67N0QBPXKXF%04d", n)
			n++
			w := envWire(id, pad)
			items = append(items, mbx.PushItem{Kind: "envelope", ItemID: id,
				Targets: []mbx.PushTarget{{HostPubkey: h.pub(), WireB64: mbx.B64(w)}}})
			sent += len(w)
		}
		out := c.mustCall(&h, "POST", "/v2/relay/items", mustJSON(t, mbx.PushRequest{Items: items}))
		if strings.Count(string(out), `"accepted"`) != len(items) {
			t.Fatalf("filling the queue: %s", out)
		}
	}
}

// TestAbuseSlowPulls: one enrolled key fills its own queue (20 MiB, pushed to itself), then opens
// 40 pulls of the largest page and reads nothing; an honest host pushes and pulls meanwhile.
// Goal (issue 25): peak RSS under 300 MB; measured 128–129 MB, bound 195 MB.
func TestAbuseSlowPulls(t *testing.T) {
	abuseRSS(t)
	dir := t.TempDir()
	c := startChild(t, dir, "")
	defer c.stop()
	a, b, mallory := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "mallory", 66)
	c.enrol(a)
	c.enrol(b)
	c.enrol(mallory)
	fillOwnQueue(t, c, mallory, 19<<20)
	base := testkit.ProcKB(t, c.cmd.Process.Pid, "VmRSS")
	addr := strings.TrimPrefix(c.url, "http://")
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	for range 40 {
		cn, err := slowPull(addr, mallory, time.Now(), "")
		if err != nil {
			t.Fatalf("slow pull: %v", err)
		}
		conns = append(conns, cn)
	}
	// The pages are built as the pulls arrive: wait for the relay's memory to stop growing
	// (bounded: at most 20 s).
	last := int64(-1)
	for i := 0; i < 40; i++ {
		time.Sleep(500 * time.Millisecond)
		rss := testkit.ProcKB(t, c.cmd.Process.Pid, "VmRSS")
		if i >= 4 && rss <= last+1024 {
			break
		}
		last = rss
	}
	// The honest host is served meanwhile.
	body := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem("01KKNTQ69NA67N0QBPXKXFN501", b)}})
	if code, out, err := c.call(&a, "POST", "/v2/relay/items", body); err != nil || code != 200 || !strings.Contains(string(out), `"accepted"`) {
		t.Errorf("push by an honest host during the attack = %d %s %v", code, out, err)
	}
	if p := c.pull(b); len(p.Items) != 1 {
		t.Errorf("honest pull during the attack = %d items, want 1", len(p.Items))
	}
	peak := testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")
	codes := map[int]int{}
	for _, cn := range conns {
		codes[slowStatus(cn)]++
	}
	t.Logf("abuse: relay, 40 slow pulls of the largest page from one key (20 MiB queue): answers %v (-1 = none yet); "+
		"honest host served; peak RSS %d MB (before the pulls %d MB; goal < 300 MB)", codes, peak>>10, base>>10)
	assertPeak(t, c, 195, "40 slow pulls of the largest page")
}
