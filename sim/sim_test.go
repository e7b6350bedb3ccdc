package sim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/failpoint"
)

// regressions are seeds that found a bug (fixed since): each runs in every test run.
var regressions = []struct {
	seed     uint64
	maxBatch int // Config.MaxBatch
	bug      string
	open     string // the bug is not fixed yet: why (the seed is skipped)
}{
	{174, 0, "a delivery receipt the relay accepted after the backup was lost by the restore, and the message was acked before it: the sender's re-push after the epoch change is a duplicate its target never sees again, so the row waits relay-accepted for retention + 24 h and then alerts \"unconfirmed\" for a delivered message; fixed in relaylink (receipts.go: resend the receipts accepted under another epoch)",
		""},
	{59, 0, "the same loss of a receipt by the restore, another schedule", ""},
	{71, SmallBatch, "a send split into several pushes: the relay accepted the first, then was restored (a new epoch) before the last answered; the host had flagged its relay-accepted rows for a re-push by then, and recorded the first push's rows afterwards, relay-accepted in the old epoch, so they were never pushed again and never arrived; fixed in host and relaylink (receipts.go: StaleAcceptsTx). Found by the soak first",
		""},
	{169, SmallBatch, "the same late record of an old epoch's acceptance, another schedule", ""},
}

func envUint(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// replay is the command that runs cfg again with its trace.
func replay(cfg Config) string {
	cmd := fmt.Sprintf("SIM_SEED=%d go test ./sim -run 'TestSim$' -v", cfg.Seed)
	if cfg.MaxBatch != BatchFor(cfg.Seed) {
		cmd = fmt.Sprintf("SIM_MAX_BATCH=%d %s", cfg.MaxBatch, cmd)
	}
	return cmd
}

// runSeed runs one seed and reports a failure with everything needed to replay it.
func runSeed(t *testing.T, cfg Config) Result {
	t.Helper()
	res, err := Run(cfg, t.TempDir())
	if err != nil || !res.OK() {
		t.Errorf("sim: seed %d failed (replay: %s)\nerror: %v\nproblems:\n  %s\ntally: %+v\nstats: %+v\ntrace tail:\n  %s",
			cfg.Seed, replay(cfg), err, summarize(res.Problems), res.Tally, res.Stats, strings.Join(res.Tail, "\n  "))
	}
	return res
}

// TestSim runs SIM_SEEDS seeds (default 200; 10 under -race or -short) from SIM_SEED_BASE
// (default 1), or the one seed SIM_SEED with its trace (-v). SIM_MESSAGES and SIM_EVENTS size
// each run. Every third seed runs with a small max_batch (BatchFor); SIM_MAX_BATCH sets it for
// every seed instead.
func TestSim(t *testing.T) {
	cfg := Config{Messages: int(envUint(t, "SIM_MESSAGES", 12)), Events: int(envUint(t, "SIM_EVENTS", 400))}
	batch := func(seed uint64) int {
		if os.Getenv("SIM_MAX_BATCH") != "" {
			return int(envUint(t, "SIM_MAX_BATCH", 0))
		}
		return BatchFor(seed)
	}
	if s := os.Getenv("SIM_SEED"); s != "" {
		cfg.Seed = envUint(t, "SIM_SEED", 0)
		cfg.MaxBatch = batch(cfg.Seed)
		if testing.Verbose() {
			cfg.Trace = os.Stdout
		}
		res := runSeed(t, cfg)
		t.Logf("sim: seed=%d hash=%s tally=%+v stats=%+v", cfg.Seed, res.Hash, res.Tally, res.Stats)
		return
	}
	def := uint64(200)
	if raceOn || testing.Short() {
		def = 10 // the race detector makes each run several times slower
	}
	n := envUint(t, "SIM_SEEDS", def)
	base := envUint(t, "SIM_SEED_BASE", 1)
	began := time.Now()
	var next, msgs, faults atomic.Int64
	var failed sync.Map
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if uint64(i) >= n || t.Failed() && failedCount(&failed) >= 5 {
					return
				}
				c := cfg
				c.Seed = base + uint64(i)
				c.MaxBatch = batch(c.Seed)
				res, err := Run(c, t.TempDir())
				msgs.Add(int64(res.Stats.Messages))
				s := res.Stats
				faults.Add(int64(s.LostRequests + s.LostAnswers + s.Duplicated + s.HostCrashes + s.RelayCrashes + s.Restores))
				if err != nil || !res.OK() {
					failed.Store(c.Seed, true)
					t.Errorf("sim: seed %d failed (replay: %s)\nerror: %v\nproblems:\n  %s\ntally: %+v\nstats: %+v\ntrace tail:\n  %s",
						c.Seed, replay(c), err, summarize(res.Problems), res.Tally, res.Stats, strings.Join(res.Tail, "\n  "))
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("sim: seeds=%d (from %d) messages=%d faults=%d failed=%d seconds=%.0f", n, base, msgs.Load(), faults.Load(),
		failedCount(&failed), time.Since(began).Seconds())
}

func failedCount(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestSimRegressions replays the seeds that found bugs, on the schedule they were found with
// (without the reads and acks added since).
func TestSimRegressions(t *testing.T) {
	for _, r := range regressions {
		t.Run(fmt.Sprintf("seed%d", r.seed), func(t *testing.T) {
			t.Logf("bug: %s", r.bug)
			if r.open != "" {
				t.Skipf("not fixed yet: %s", r.open)
			}
			runSeed(t, Config{Seed: r.seed, MaxBatch: r.maxBatch, NoMoves: true})
		})
	}
}

// TestSimIsDeterministic runs one seed twice: the same seed gives the same trace, event for
// event (the hash covers every event, every answer's bytes and every step's outcome).
func TestSimIsDeterministic(t *testing.T) {
	for _, seed := range []uint64{7, 4242} {
		a := runSeed(t, Config{Seed: seed})
		b := runSeed(t, Config{Seed: seed})
		if a.Hash != b.Hash {
			t.Errorf("seed %d: trace hashes differ: %s and %s", seed, a.Hash, b.Hash)
		}
		if a.Stats != b.Stats {
			t.Errorf("seed %d: stats differ: %+v and %+v", seed, a.Stats, b.Stats)
		}
		if s := a.Stats; s.LostRequests == 0 || s.LostAnswers == 0 || s.Duplicated == 0 || s.HostCrashes == 0 || s.RelayCrashes == 0 || s.Restores == 0 || s.Moves == 0 {
			t.Errorf("seed %d: the run met not every kind of fault (or read no mail), so it proves little: %+v", seed, s)
		}
		other := runSeed(t, Config{Seed: seed + 1})
		if other.Hash == a.Hash {
			t.Errorf("seeds %d and %d gave the same trace", seed, seed+1)
		}
	}
}

// TestSimOracleSelfTest runs seeds with the hosts' dedup turned off (the failpoint
// mailstore.FailSkipDedup): a request delivered twice, or an item pulled again after the restore,
// is then stored twice, and the oracle must report it (a delivery count above 1, or a copy gone
// back to unread), each within the first ten seeds. An oracle that counts mailbox rows would pass
// these runs.
func TestSimOracleSelfTest(t *testing.T) {
	defer failpoint.Enable(mailstore.FailSkipDedup, failpoint.Error)()
	var dup, back int
	for seed := uint64(1); seed <= 10 && (dup == 0 || back == 0); seed++ {
		res, err := Run(Config{Seed: seed, MaxBatch: BatchFor(seed)}, t.TempDir())
		t.Logf("seed %d with the dedup skipped: error %v, duplicated=%d went_back=%d", seed, err, res.Tally.Duplicated, res.Tally.WentBack)
		dup += res.Tally.Duplicated
		back += res.Tally.WentBack
		if (res.Tally.Duplicated > 0 || res.Tally.WentBack > 0) && res.OK() {
			t.Fatalf("seed %d: a duplicate counted, yet the run is OK: %+v", seed, res.Tally)
		}
	}
	if dup == 0 || back == 0 {
		t.Fatalf("seeds with the dedup skipped, and the oracle saw duplicated=%d went_back=%d (want both at least 1)", dup, back)
	}
}
