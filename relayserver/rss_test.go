package relayserver_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// exercise enrols nothing new: it pulls and pushes as the enrolled hosts would.
func exercise(t *testing.T, c *child, hs []host) {
	for i, h := range hs {
		c.pull(h)
		body := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(fmt.Sprintf("rss-%d", i), hs[(i+1)%len(hs)])}})
		c.mustCall(&h, "POST", "/v2/relay/items", body)
	}
}

// TestPeakRSSWithMillionItems measures the peak RSS of a relay process serving a store that holds
// 1,000,000 items for 10,000 targets, against the same relay on an almost empty store: nothing the
// relay keeps in memory may grow with the queues. Set MBX_BENCH_LARGE=1 to run it.
func TestPeakRSSWithMillionItems(t *testing.T) {
	large(t)
	hs := []host{newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "gamma", 3)}
	prepare := func(perTarget, targets int) string {
		dir := t.TempDir()
		st, err := sqlitestore.Open(bg, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var keys []string
		for _, h := range hs {
			keys = append(keys, h.pub())
			err := st.Update(bg, func(tx relayserver.Tx) error {
				return tx.PutEnrolment(relayserver.Enrolment{HostPubkey: h.pub(), HostName: h.name, AuthorizedBy: "host-key", EnrolledAt: time.Now()})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := len(keys); i < targets; i++ {
			keys = append(keys, mbx.B64(bytes.Repeat([]byte{byte(i), byte(i >> 8), 1}, 11)[:32]))
		}
		fill(t, st, hs[0].pub(), keys, perTarget)
		return dir
	}
	measure := func(dir string) int64 {
		c := startChild(t, dir, "")
		exercise(t, c, hs)
		kb := testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")
		c.stop()
		return kb
	}
	small := measure(prepare(1, 100))
	start := time.Now()
	bigDir := prepare(100, 10_000)
	t.Logf("filled 1,000,000 items for 10,000 targets in %v", time.Since(start).Round(time.Second))
	big := measure(bigDir)
	t.Logf("peak RSS of relay serve: %d kB with 100 items, %d kB with 1,000,000 items", small, big)
	if big > small+150*1024 {
		t.Fatalf("peak RSS grew by %d kB with the queue", big-small)
	}
}
