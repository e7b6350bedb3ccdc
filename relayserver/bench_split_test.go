package relayserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// The pushers of BenchmarkPushSplit run in a child process (this test binary again, running
// TestBenchPusherProcess), so that the relay's CPU (this process) and the pushers' CPU (the
// child's: signing hops, building bodies, its HTTP client) are measured apart.
const pusherEnv = "MBX_BENCH_PUSHER_JOB"

// pusherJob is what the child process pushes.
type pusherJob struct {
	URL     string   `json:"url"`
	Seeds   []string `json:"seeds"` // the senders' key seeds
	Names   []string `json:"names"`
	Targets []string `json:"targets"`
	Pushes  int      `json:"pushes"` // per sender
	Batch   int      `json:"batch"`
	// Pulls, when not 0, makes the child pull that many 500-item pages from the front of the
	// queue of the first sender's key instead of pushing.
	Pulls int `json:"pulls"`
}

// pusherReport is what the child measured of its own load.
type pusherReport struct {
	Items   int64         `json:"items"`
	Elapsed time.Duration `json:"elapsed"`
	CPU     time.Duration `json:"cpu"`
}

// TestBenchPusherProcess is the child of BenchmarkPushSplit; it skips unless started by it.
func TestBenchPusherProcess(t *testing.T) {
	raw := os.Getenv(pusherEnv)
	if raw == "" {
		t.Skip("the pusher process of BenchmarkPushSplit")
	}
	var job pusherJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(job.Seeds)}}
	cpu0, start := cpuTime(), time.Now()
	if job.Pulls > 0 {
		key, err := mbx.SigningKeyFromSeed(job.Seeds[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := pullAll(client, job, key, job.Names[0]); err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(pusherReport{Items: int64(job.Pulls) * 500, Elapsed: time.Since(start), CPU: cpuTime() - cpu0})
		fmt.Printf("PUSHER-REPORT %s\n", out)
		return
	}
	var wg sync.WaitGroup
	errs := make([]error, len(job.Seeds))
	for s, seed := range job.Seeds {
		key, err := mbx.SigningKeyFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[s] = pushAll(client, job, key, job.Names[s]) })
	}
	wg.Wait()
	rep := pusherReport{Items: int64(len(job.Seeds) * job.Pushes * job.Batch), Elapsed: time.Since(start), CPU: cpuTime() - cpu0}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	out, _ := json.Marshal(rep)
	fmt.Printf("PUSHER-REPORT %s\n", out)
}

// pushAll pushes job.Pushes batches as one sender; every item must be accepted.
func pushAll(client *http.Client, job pusherJob, key mbx.SigningKey, name string) error {
	for n := range job.Pushes {
		items := make([]mbx.PushItem, job.Batch)
		for i := range items {
			id := name + "-" + strconv.Itoa(n) + "-" + strconv.Itoa(i)
			items[i] = mbx.PushItem{Kind: "envelope", ItemID: id, Targets: []mbx.PushTarget{{
				HostPubkey: job.Targets[(n*job.Batch+i)%len(job.Targets)], WireB64: mbx.B64(envWire(id, ""))}}}
		}
		body, err := json.Marshal(mbx.PushRequest{Items: items})
		if err != nil {
			return err
		}
		req, _ := http.NewRequest("POST", job.URL+"/v2/relay/items", bytes.NewReader(body))
		for k, v := range mbx.SignRelayHop(key, name, "POST", "/v2/relay/items", body, time.Now(), true) {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || bytes.Count(out, []byte(`"status":"accepted"`)) != job.Batch {
			return fmt.Errorf("push: %d %.300s", resp.StatusCode, out)
		}
	}
	return nil
}

// pullAll pulls job.Pulls pages of 500 items from the front of the queue as one host.
func pullAll(client *http.Client, job pusherJob, key mbx.SigningKey, name string) error {
	const path = "/v2/relay/items?after=0&limit=500"
	for range job.Pulls {
		req, _ := http.NewRequest("GET", job.URL+path, nil)
		for k, v := range mbx.SignRelayHop(key, name, "GET", path, nil, time.Now(), true) {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 500*100 {
			return fmt.Errorf("pull: %d, %d bytes", resp.StatusCode, n)
		}
	}
	return nil
}

// BenchmarkPullSplit pulls 500-item pages from a queue 1,000 deep with the puller in a child
// process, as BenchmarkPushSplit does: relay-cpu-µs/item is the relay's CPU per item pulled.
// b.N counts pages.
func BenchmarkPullSplit(b *testing.B) {
	r := benchRelay(b, sqlitestore.Options{})
	a, t1 := newHost(b, "alpha", 1), newHost(b, "beta", 2)
	r.enrol(a)
	r.enrol(t1)
	fill(b, r.store, a.pub(), []string{t1.pub()}, 1_000)
	job := pusherJob{URL: r.ts.URL, Seeds: []string{t1.key.Seed()}, Names: []string{t1.name}, Pulls: b.N}
	relayCPU, rep := runChild(b, job)
	items := float64(rep.Items)
	b.ReportMetric(float64(relayCPU.Nanoseconds())/1e3/items, "relay-cpu-µs/item")
	b.ReportMetric(float64(rep.CPU.Nanoseconds())/1e3/items, "puller-cpu-µs/item")
}

// runChild runs the pusher process on job and returns this process's CPU meanwhile and the
// child's report.
func runChild(b *testing.B, job pusherJob) (time.Duration, pusherReport) {
	raw, err := json.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchPusherProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), pusherEnv+"="+string(raw))
	cpu0 := cpuTime()
	b.ResetTimer()
	out, err := cmd.CombinedOutput()
	relayCPU := cpuTime() - cpu0
	b.StopTimer()
	var rep pusherReport
	_, line, _ := bytes.Cut(out, []byte("PUSHER-REPORT "))
	line, _, _ = bytes.Cut(line, []byte("\n"))
	if err != nil || json.Unmarshal(line, &rep) != nil || rep.Items == 0 {
		b.Fatalf("pusher process: %v\n%s", err, out)
	}
	return relayCPU, rep
}

// BenchmarkPushSplit is the push load of BenchmarkPush (64 senders, 1 item a push) and of
// BenchmarkPushBatch200 (4 senders here, 200 items a push) with the pushers in a child process:
// relay-cpu-µs/item is this process (the relay, and a test harness that idles meanwhile),
// pusher-cpu-µs/item the child's own figure for its load. b.N counts pushes.
func BenchmarkPushSplit(b *testing.B) {
	for _, c := range []struct{ senders, batch int }{{64, 1}, {4, 200}} {
		b.Run(fmt.Sprintf("batch=%d", c.batch), func(b *testing.B) { benchSplit(b, c.senders, c.batch) })
	}
}

func benchSplit(b *testing.B, senders, batch int) {
	r := benchRelay(b, sqlitestore.Options{})
	job := pusherJob{URL: r.ts.URL, Pushes: max(b.N/senders, 1), Batch: batch}
	for i := range senders {
		h := newHost(b, fmt.Sprintf("s%d", i), uint64(200+i))
		r.enrol(h)
		job.Seeds, job.Names = append(job.Seeds, h.key.Seed()), append(job.Names, h.name)
	}
	for i := range 8 {
		h := newHost(b, fmt.Sprintf("t%d", i), uint64(400+i))
		r.enrol(h)
		job.Targets = append(job.Targets, h.pub())
	}
	st0 := r.store.Stats()
	relayCPU, rep := runChild(b, job)
	st := r.store.Stats()
	items := float64(rep.Items)
	b.ReportMetric(items/rep.Elapsed.Seconds(), "items/s")
	b.ReportMetric(float64(relayCPU.Microseconds())/items, "relay-cpu-µs/item")
	b.ReportMetric(float64(rep.CPU.Microseconds())/items, "pusher-cpu-µs/item")
	b.ReportMetric(float64((relayCPU+rep.CPU).Microseconds())/items, "cpu-µs/item")
	b.ReportMetric(float64(st.Units-st0.Units)/float64(max(st.Commits-st0.Commits, 1)), "units/commit")
}
