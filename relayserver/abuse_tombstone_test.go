package relayserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// storeSize is what the SQLite store in dir takes on disk: the database and its WAL.
func storeSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, name := range []string{sqlitestore.DBFile, sqlitestore.DBFile + "-wal"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// floodSelf pushes batches of 200 envelopes from h to itself and acks each batch, leaving only
// dedup rows behind (finding 2 of issue 25). It returns how many items were accepted and the
// rejection codes of the others.
func (c *child) floodSelf(h host, epoch string, batches int, tag string) (accepted int, rejected map[string]int) {
	c.t.Helper()
	rejected = map[string]int{}
	for b := range batches {
		items := make([]mbx.PushItem, 200)
		for i := range items {
			items[i] = envItem(fmt.Sprintf("%s-%04d-%03d", tag, b, i), h)
		}
		resp := decode[mbx.PushResponse](c.t, c.mustCall(&h, "POST", "/v2/relay/items", mustJSON(c.t, mbx.PushRequest{Items: items})))
		var through int64
		for _, r := range resp.Results {
			switch {
			case r.Status == "accepted":
				accepted++
				for _, tg := range r.Targets {
					through = max(through, tg.Seq)
				}
			case strings.HasPrefix(r.Status, "rejected:"):
				rejected[strings.TrimPrefix(r.Status, "rejected:")]++
			}
		}
		if through > 0 {
			c.mustCall(&h, "POST", "/v2/relay/ack", mustJSON(c.t, mbx.AckRequest{Epoch: epoch, Through: through}))
		}
	}
	return accepted, rejected
}

// TestAbuseTombstoneFlood (finding 2): one enrolled key pushes 12,000 envelopes to itself and acks
// them (the attack), then 100 keys push 600 each, four at a time. Each key's dedup rows
// count against its cap (MaxSenderDedup, 400 here), so the flood stops at 100 × 400 rows (6.4 MB
// charged), under the relay-wide limit of 8 MB that counts them too and that the 60,000 rows of
// an uncapped flood (9.6 MB) would pass: an honest host's push is accepted after it.
func TestAbuseTombstoneFlood(t *testing.T) {
	abuseRSS(t)
	dir := t.TempDir()
	c := startChild(t, dir, "", envChildOptions+`={"NewEnrolmentsPerDay":-1,"EnrolCallsPerMinute":-1,"MaxSenderDedup":12000,"MaxRelayBytes":67108864}`)
	defer func() { c.stop() }()
	a, b, mallory := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "mallory", 66)
	c.enrol(a)
	c.enrol(b)
	c.enrol(mallory)
	info := decode[mbx.InfoResponse](t, c.mustCall(nil, "GET", "/v2/relay/info", nil))
	start := storeSize(t, dir)
	acc, rej := c.floodSelf(mallory, info.Epoch, 60, "m")
	one := storeSize(t, dir)
	t.Logf("abuse: relay, one key pushes 12,000 envelopes to itself and acks them: %d accepted, refused %v; store grew %.1f MB (%d B per tombstone); peak RSS %d MB",
		acc, rej, float64(one-start)/1e6, (one-start)/int64(max(acc, 1)), testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")>>10)
	assertPeak(t, c, 65, "one key's tombstone flood") // measured 39 MB
	if acc != 12000 {
		t.Errorf("one key's flood under its cap: %d of 12,000 accepted, refused %v", acc, rej)
	}

	// 100 keys, each past its cap of dedup rows.
	c2dir := t.TempDir()
	c.stop()
	c = startChild(t, c2dir, "", envChildOptions+`={"NewEnrolmentsPerDay":-1,"EnrolCallsPerMinute":-1,"MaxSenderDedup":400,"MaxRelayBytes":8000000}`)
	c.enrol(a)
	c.enrol(b)
	info = decode[mbx.InfoResponse](t, c.mustCall(nil, "GET", "/v2/relay/info", nil))
	flood := make([]host, 100)
	for i := range flood {
		flood[i] = newHost(t, fmt.Sprintf("flood%d", i), uint64(1000+i))
		c.enrol(flood[i])
	}
	start = storeSize(t, c2dir)
	var mu sync.Mutex
	total, codes := 0, map[string]int{}
	var wg sync.WaitGroup
	for i, h := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc, rej := c.floodSelf(h, info.Epoch, 3, fmt.Sprintf("f%d", i))
			mu.Lock()
			defer mu.Unlock()
			total += acc
			for k, v := range rej {
				codes[k] += v
			}
		}()
		if i%4 == 3 {
			wg.Wait() // four keys at a time: the machine is shared
		}
	}
	wg.Wait()
	grown := storeSize(t, c2dir) - start
	honest := 0
	for n := range 10 {
		if c.honestPush(a, b, n) {
			honest++
		}
	}
	peak := testkit.ProcKB(t, c.cmd.Process.Pid, "VmHWM")
	t.Logf("abuse: relay, 100 keys each push 600 envelopes to themselves and ack them (cap 400 dedup rows a key): %d accepted, refused %v; "+
		"store grew %.1f MB; %d of 10 honest pushes accepted; peak RSS %d MB", total, codes, float64(grown)/1e6, honest, peak>>10)
	if total > 100*400 {
		t.Errorf("100 keys stored %d dedup rows, over 100 × their cap of 400", total)
	}
	assertPeak(t, c, 65, "100 keys' tombstone flood") // measured 41–42 MB
	if honest != 10 {
		t.Errorf("after the flood %d of 10 honest pushes were accepted", honest)
	}
}
