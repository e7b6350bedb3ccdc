package relayserver_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// load is pushes from several senders to one target against a child relay, recording every
// item the relay answered 200 for as accepted or duplicate, with its seq.
type load struct {
	mu       sync.Mutex
	answered map[string]int64 // item id → seq promised
	pushes   atomic.Int64     // pushes answered 200
	wg       sync.WaitGroup
}

// pushLoad starts 2 pushers per sender, each pushing batches of 4 new items to target until a
// push fails (the relay went away) or it pushed perSender/2 batches (the relay's push rate is
// per sender, 120 a minute).
func pushLoad(t *testing.T, c *child, senders []host, target host, perSender int) *load {
	l := &load{answered: map[string]int64{}}
	for si, s := range senders {
		for g := 0; g < 2; g++ {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for n := 0; n < perSender/2; n++ {
					var items []mbx.PushItem
					for k := 0; k < 4; k++ {
						items = append(items, envItem(fmt.Sprintf("01KKNTQ2CN9WJ3MR4Q%d%d%06d", si, g, n*4+k), target))
					}
					code, body, err := c.call(&s, "POST", "/v2/relay/items", mustJSON(t, mbx.PushRequest{Items: items}))
					if err != nil {
						return // the relay stopped accepting or died: nothing was promised
					}
					if code != 200 {
						continue // refused (503 while closing, 429): nothing was promised
					}
					var resp mbx.PushResponse
					if err := json.Unmarshal(body, &resp); err != nil {
						t.Errorf("push answered 200 with %s: %v", body, err)
						return
					}
					l.pushes.Add(1)
					l.mu.Lock()
					for _, r := range resp.Results {
						if r.Status == "accepted" || r.Status == "duplicate" {
							l.answered[r.ItemID] = r.Targets[0].Seq
						}
					}
					l.mu.Unlock()
				}
			}()
		}
	}
	return l
}

// waitPushes waits until n pushes were answered.
func (l *load) waitPushes(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for l.pushes.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d pushes answered", l.pushes.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkCommitted opens the stopped store and checks that every item the relay answered for is
// stored for target with the seq it was answered with.
func (l *load) checkCommitted(t *testing.T, dir string, target host) {
	t.Helper()
	st, err := sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stored := map[string]int64{}
	for after := int64(0); ; {
		p, err := st.Pull(bg, target.pub(), after, 500, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			stored[it.ItemID] = it.Seq
			after = it.Seq
		}
		if !p.More {
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.answered) == 0 {
		t.Fatal("no push was answered before the signal")
	}
	for id, seq := range l.answered {
		if got, ok := stored[id]; !ok || got != seq {
			t.Errorf("item %s answered with seq %d is stored as %d (present %v)", id, seq, got, ok)
		}
	}
	t.Logf("%d items answered, %d stored", len(l.answered), len(stored))
}

// parkPolls starts n long polls of h (whose queue stays empty) with a 30 s wait, and returns
// where their answers arrive.
func parkPolls(c *child, h host, n int) chan error {
	out := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			code, body, err := c.call(&h, "GET", "/v2/relay/items?after=0&wait=30", nil)
			if err == nil && code != 200 {
				err = fmt.Errorf("parked poll answered %d %s", code, body)
			}
			out <- err
		}()
	}
	return out
}

// waitParked waits until the child in dir reports n parked long polls on its metrics listener.
func waitParked(t *testing.T, dir string, n float64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "metrics-addr"))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + strings.TrimSpace(string(b)) + "/metrics"
	for deadline := time.Now().Add(time.Minute); ; {
		if got := metric(scrape(t, url, ""), "agentmbx_relay_long_polls_parked"); got == n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%v polls parked, want %v", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSIGTERMUnderLoad: a relay child under pushes from three senders, with long polls parked,
// gets SIGTERM. The polls are answered (200, at once: a poll left parked would hold the drain
// past its 10 s bound and the child would exit 1), the child exits 0, and every item answered 200
// is in the store with the seq it was answered with. Bounded: at most 3 × 40 pushes of 4 items.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	dir, a, b := crashSetup(t)
	s2, s3, idle := newHost(t, "sigma", 12), newHost(t, "tau", 13), newHost(t, "idle", 14)
	c := startChild(t, dir, "")
	for _, h := range []host{s2, s3, idle} {
		c.enrol(h)
	}
	polls := parkPolls(c, idle, 2)
	l := pushLoad(t, c, []host{a, s2, s3}, b, 40)
	l.waitPushes(t, 12)
	waitParked(t, dir, 2)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-polls; err != nil {
			t.Errorf("a parked poll was not answered: %v", err)
		}
	}
	l.wg.Wait()
	select {
	case <-c.p.Done():
		if err := c.p.Err(); err != nil {
			t.Fatalf("relay after SIGTERM under load: %v", err)
		}
	case <-time.After(testkit.ChildWait):
		t.Fatal("relay did not stop after SIGTERM")
	}
	l.checkCommitted(t, dir, b)
}

// TestSIGKILLUnderLoad: the same load, ended by SIGKILL: every item answered 200 survives.
func TestSIGKILLUnderLoad(t *testing.T) {
	t.Parallel()
	dir, a, b := crashSetup(t)
	s2 := newHost(t, "sigma", 12)
	c := startChild(t, dir, "")
	c.enrol(s2)
	l := pushLoad(t, c, []host{a, s2}, b, 40)
	l.waitPushes(t, 12)
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.waitKilled()
	l.wg.Wait()
	l.checkCommitted(t, dir, b)
}
