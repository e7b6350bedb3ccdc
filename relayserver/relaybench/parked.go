package relaybench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/pgstore"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// ParkedConfig is one run of the parked-poll benchmark (`relay bench --parked N`): N synthetic
// hosts each park a real long poll on a relay in this process; the load runs in child processes
// (Loader) so that the relay's own process holds only the relay's side of the connections.
type ParkedConfig struct {
	// Parked is the number of hosts, each with one long poll parked. Required.
	Parked int
	// Rate is the pushes per second of the push phase, each to a random parked host. Default 20.
	Rate float64
	// Duration is the length of the idle window (CPU measured while all sit) and of the push
	// phase. Default 5 s.
	Duration time.Duration
	// Wait is the wait each poll asks for; the relay's MaxWait is set to it. 0: longer than the
	// run, so no poll returns unwoken and the idle window sees only parked polls.
	Wait time.Duration
	// Dir holds the SQLite store (a fresh directory inside it, removed at the end); "" a
	// temporary directory. Unused with DB.
	Dir string
	// DB is a PostgreSQL URL: the relays share that database (its tables are written; use a
	// database of its own). "" runs one relay on SQLite.
	DB string
	// Replicas is 1, or 2 with DB: polls park on the first replica, pushes alternate between the
	// two, and those sent to the second are reported as cross-replica wakes.
	Replicas int
	// Loader is the command of one load child: the caller's binary, re-executed so that it runs
	// RunLoader with its stdin and stdout. Required.
	Loader func() *exec.Cmd
	// Progress, when set, is told what the run is doing.
	Progress func(string)
	// HeapProfile, when set, is a file the heap profile of the relay process is written to once
	// every poll is parked (go tool pprof -sample_index=inuse_space).
	HeapProfile string
	// Restart, after the push phase, restarts the relay the polls park on (a graceful shutdown,
	// which answers them with Retry-After: 5, then a new relay on the same address) and measures
	// how the hosts come back: each pauses as a host's receive loop does (checkpoint.RetryPause).
	Restart bool
	// Standard parks polls the standard way (a handler goroutine each) instead of holding them
	// as bare connections, to compare.
	Standard bool
	// Tune, when set, adjusts each relay's options before it starts (tests, comparisons).
	Tune func(*relayserver.Options)
}

// ParkedResult is what a parked run measured. RSS and heap figures are of this process, which
// runs the relay(s) and the coordinator but none of the load; each is read after a forced garbage
// collection that returns freed memory to the system, so they count what the parked polls hold.
type ParkedResult struct {
	Parked int `json:"parked"`
	// Mode is "held" (parked polls held as bare connections, as relay serve runs) or "standard".
	Mode     string `json:"mode"`
	Replicas int    `json:"replicas"`
	Loaders  int    `json:"loaders"`
	// Store is "sqlite" or "postgres".
	Store string `json:"store"`
	// WaitSeconds is the wait each poll asked for.
	WaitSeconds float64 `json:"wait_seconds"`
	// ParkSeconds is how long it took to park them all.
	ParkSeconds float64 `json:"park_seconds"`

	RSSBytesBefore    int64   `json:"rss_bytes_before"`
	RSSBytesIdle      int64   `json:"rss_bytes_idle"`
	RSSBytesPerParked float64 `json:"rss_bytes_per_parked"`
	// HeapBytesPerParked is the Go heap in use plus goroutine stacks, per parked poll.
	HeapBytesPerParked float64 `json:"heap_bytes_per_parked"`
	// StackBytesPerParked is the goroutine stacks' part of it.
	StackBytesPerParked float64 `json:"stack_bytes_per_parked"`
	// GoroutinesPerParked is the goroutines the relay process added, per parked poll.
	GoroutinesPerParked float64 `json:"goroutines_per_parked"`
	// CPUPctIdle is the process's CPU time over the idle window's wall time (100 = one core).
	CPUPctIdle  float64 `json:"cpu_pct_idle"`
	IdleSeconds float64 `json:"idle_seconds"`

	// Pushes were answered during the push phase and their items received by the parked polls.
	// A wake is from the push's answer to the item's arrival in the poll (0 when the item came
	// first).
	Pushes    int64   `json:"pushes"`
	WakeP50Ms float64 `json:"wake_p50_ms"`
	WakeP99Ms float64 `json:"wake_p99_ms"`
	WakeMaxMs float64 `json:"wake_max_ms"`
	// With two replicas: the pushes sent to the other replica than the one the polls park on.
	CrossPushes    int64   `json:"cross_pushes,omitempty"`
	CrossWakeP50Ms float64 `json:"cross_wake_p50_ms,omitempty"`
	CrossWakeP99Ms float64 `json:"cross_wake_p99_ms,omitempty"`
	CrossWakeMaxMs float64 `json:"cross_wake_max_ms,omitempty"`
	// With Restart: seconds from the start of the shutdown until 10%, 50%, 90% and all of the
	// polls were parked again on the new relay, and the most that arrived in one second.
	RestartP10S     float64 `json:"restart_p10_s,omitempty"`
	RestartP50S     float64 `json:"restart_p50_s,omitempty"`
	RestartP90S     float64 `json:"restart_p90_s,omitempty"`
	RestartAllS     float64 `json:"restart_all_s,omitempty"`
	RestartPeakPerS int     `json:"restart_peak_per_s,omitempty"`
}

// perLoader is the most polls one load child holds (each a socket, under a usual open-file limit
// of 20,000 with room for the pushes).
const perLoader = 4000

// fdHeadroom is the files the relay process needs beside the parked polls.
const fdHeadroom = 512

func (c *ParkedConfig) defaults() error {
	if c.Rate == 0 {
		c.Rate = 20
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	switch {
	case c.Parked < 1 || c.Parked > 1_000_000:
		return fmt.Errorf("relaybench: %d parked: 1 to 1,000,000", c.Parked)
	case c.Rate < 0.1 || c.Rate > 10_000:
		return fmt.Errorf("relaybench: rate %v: 0.1 to 10,000 pushes per second", c.Rate)
	case c.Duration < 100*time.Millisecond || c.Duration > time.Hour:
		return fmt.Errorf("relaybench: duration %s: 0.1 s to 1 h", c.Duration)
	case c.Wait < 0 || c.Wait > time.Hour:
		return fmt.Errorf("relaybench: wait %s: 0 to 1 h", c.Wait)
	case c.Replicas < 1 || c.Replicas > 2:
		return fmt.Errorf("relaybench: %d replicas: 1 or 2", c.Replicas)
	case c.Replicas == 2 && c.DB == "":
		return errors.New("relaybench: two replicas share a PostgreSQL database: give its URL")
	case c.Loader == nil:
		return errors.New("relaybench: no loader command")
	}
	return nil
}

// RunParked runs the parked-poll benchmark: it enrols Parked hosts, serves a relay (two with
// Replicas 2) on loopback, starts the load children, waits until every host's poll is parked,
// measures this process's memory and, over an idle window, its CPU, then has the children push
// at Rate to random parked hosts for Duration and collects the wake times. It removes what it
// made, also when it fails or ctx ends.
func RunParked(ctx context.Context, cfg ParkedConfig) (ParkedResult, error) {
	res := ParkedResult{Parked: cfg.Parked}
	if err := cfg.defaults(); err != nil {
		return res, err
	}
	res.Replicas = cfg.Replicas
	res.Mode = "held"
	if cfg.Standard {
		res.Mode = "standard"
	}
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	if lim, err := raiseNoFile(); err != nil || lim < uint64(cfg.Parked+fdHeadroom) {
		return res, fmt.Errorf("relaybench: the open-file limit (%d) is below the %d parked polls plus %d: raise it (ulimit -n, or LimitNOFILE= in a systemd unit) (%v)",
			lim, cfg.Parked, fdHeadroom, err)
	}
	wait := cfg.Wait
	if wait == 0 {
		wait = time.Hour
	}
	res.WaitSeconds = wait.Seconds()

	key, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		return res, err
	}
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return res, err
	}
	stores, cleanup, err := openStores(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer cleanup()
	res.Store = "sqlite"
	if cfg.DB != "" {
		res.Store = "postgres"
	}
	say("enrolling %d hosts", cfg.Parked)
	if err := enrolDirect(ctx, stores[0], seed, cfg.Parked); err != nil {
		return res, fmt.Errorf("relaybench: enrol: %w", err)
	}
	relays := make([]*parkedRelay, len(stores))
	relayOpts := make([]relayserver.Options, len(stores))
	defer func() {
		for _, r := range relays {
			if r != nil {
				r.stop()
			}
		}
	}()
	for i, st := range stores {
		opt := relayserver.Options{Key: key, Limits: liftedLimits(), PushesPerMinute: -1, EnrolCallsPerMinute: -1,
			NewEnrolmentsPerDay: -1, MaxPerClient: 1 << 20, Version: "bench", MaxWait: wait,
			MaxWaiting: cfg.Parked + 64, MaxPullsPerClient: 1 << 20}
		if cfg.Tune != nil {
			cfg.Tune(&opt)
		}
		relayOpts[i] = opt
		if relays[i], err = startParkedRelay(ctx, st, opt, !cfg.Standard); err != nil {
			return res, fmt.Errorf("relaybench: relay: %w", err)
		}
	}

	before := measureMem()
	res.RSSBytesBefore = before.rss

	loaders := (cfg.Parked + perLoader - 1) / perLoader
	res.Loaders = loaders
	var pushURLs []string
	for _, r := range relays {
		pushURLs = append(pushURLs, r.base)
	}
	kids := make([]*loaderProc, 0, loaders)
	defer func() {
		for _, k := range kids {
			k.stop()
		}
	}()
	say("parking %d polls from %d load processes", cfg.Parked, loaders)
	start := time.Now()
	for i := range loaders {
		lo, hi := i*cfg.Parked/loaders, (i+1)*cfg.Parked/loaders
		lc := loaderConfig{Seed: seed, Lo: lo, Hi: hi, ParkURL: relays[0].base, PushURLs: pushURLs,
			Source: fmt.Sprintf("127.0.0.%d", 2+i%250), WaitSeconds: int(wait / time.Second), Epoch: relays[0].srv.Epoch(),
			Rate: cfg.Rate / float64(loaders), PushSeconds: cfg.Duration.Seconds(), Restart: cfg.Restart}
		k, err := startLoader(cfg.Loader(), lc)
		if err != nil {
			return res, err
		}
		kids = append(kids, k)
	}
	if err := waitParked(ctx, relays[0].srv, cfg.Parked, kids); err != nil {
		return res, err
	}
	res.ParkSeconds = time.Since(start).Seconds()

	say("%d parked; idle for %s", cfg.Parked, cfg.Duration)
	idle := measureMem()
	if cfg.HeapProfile != "" {
		if err := writeHeapProfile(cfg.HeapProfile); err != nil {
			return res, err
		}
	}
	cpu0, _ := cpuTime()
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.Duration):
	}
	cpu1, ok := cpuTime()
	el := time.Since(t0)
	res.IdleSeconds = el.Seconds()
	if ok {
		res.CPUPctIdle = 100 * float64(cpu1-cpu0) / float64(el)
	}
	if n := relays[0].srv.Parked(); n != cfg.Parked && cfg.Wait == 0 {
		return res, fmt.Errorf("relaybench: %d of %d polls still parked after the idle window", n, cfg.Parked)
	}
	res.RSSBytesIdle = idle.rss
	res.RSSBytesPerParked = float64(res.RSSBytesIdle-before.rss) / float64(cfg.Parked)
	res.HeapBytesPerParked = float64(idle.heap-before.heap) / float64(cfg.Parked)
	res.StackBytesPerParked = float64(idle.stack-before.stack) / float64(cfg.Parked)
	res.GoroutinesPerParked = float64(idle.goroutines-before.goroutines) / float64(cfg.Parked)

	say("pushing %.1f/s for %s", cfg.Rate, cfg.Duration)
	var local, cross []float64
	for _, k := range kids {
		if err := k.send(loaderCommand{Push: true}); err != nil {
			return res, err
		}
	}
	for _, k := range kids {
		rep, err := k.result(ctx)
		if err != nil {
			return res, err
		}
		local = append(local, rep.Wakes...)
		cross = append(cross, rep.Cross...)
	}
	res.Pushes = int64(len(local))
	res.WakeP50Ms, res.WakeP99Ms, res.WakeMaxMs = quantiles(local)
	res.CrossPushes = int64(len(cross))
	res.CrossWakeP50Ms, res.CrossWakeP99Ms, res.CrossWakeMaxMs = quantiles(cross)
	if res.Pushes+res.CrossPushes == 0 {
		return res, errors.New("relaybench: no push completed")
	}
	if cfg.Restart {
		say("restarting the relay")
		if err := restartRelay(ctx, &relays[0], stores[0], relayOpts[0], !cfg.Standard, cfg.Parked, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// restartRelay shuts *r down gracefully (its parked polls answered with Retry-After: 5), starts
// a new relay on the same store and address, and records how the hosts came back.
func restartRelay(ctx context.Context, r **parkedRelay, st relayserver.Store, opt relayserver.Options, held bool, n int, res *ParkedResult) error {
	addr := strings.TrimPrefix((*r).base, "http://")
	start := time.Now()
	(*r).stop()
	*r = nil
	srv, err := relayserver.New(ctx, st, opt)
	if err != nil {
		return fmt.Errorf("relaybench: restart: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("relaybench: restart: %w", err)
	}
	hs := relayserver.NewHTTPServer(srv)
	if held {
		ln = srv.Listener(ln)
	}
	nr := &parkedRelay{srv: srv, hs: hs, base: "http://" + addr, served: make(chan error, 1)}
	go func() { nr.served <- hs.Serve(ln) }()
	*r = nr
	marks := []struct {
		frac float64
		at   *float64
	}{{0.1, &res.RestartP10S}, {0.5, &res.RestartP50S}, {0.9, &res.RestartP90S}, {1, &res.RestartAllS}}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var perSecond []int // parked polls counted at each second's end
	for {
		got := srv.Parked()
		el := time.Since(start)
		for _, m := range marks {
			if *m.at == 0 && float64(got) >= m.frac*float64(n) {
				*m.at = el.Seconds()
			}
		}
		for s := len(perSecond); time.Duration(s+1)*time.Second <= el; s++ {
			perSecond = append(perSecond, got)
		}
		if got >= n {
			break
		}
		if el > 3*time.Minute {
			return fmt.Errorf("relaybench: restart: %d of %d polls back after %s", got, n, el)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	prev := 0
	for _, c := range append(perSecond, n) {
		res.RestartPeakPerS = max(res.RestartPeakPerS, c-prev)
		prev = c
	}
	return nil
}

// quantiles returns the 50th and 99th percentiles and the maximum of ms (nearest rank).
func quantiles(ms []float64) (p50, p99, top float64) {
	if len(ms) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ms)
	at := func(q float64) float64 {
		i := int(q*float64(len(ms))+0.999999) - 1
		return ms[min(max(i, 0), len(ms)-1)]
	}
	return at(0.50), at(0.99), ms[len(ms)-1]
}

func liftedLimits() mbx.Limits {
	lim := mbx.DefaultLimits()
	lim.MaxQueueItems, lim.MaxSenderItems, lim.MaxOwnerItems = 1<<40, 1<<40, 1<<40
	lim.MaxQueueBytes, lim.MaxSenderBytes, lim.MaxOwnerBytes = 1<<50, 1<<50, 1<<50
	return lim
}

// openStores opens the store of each replica: one SQLite store in a fresh directory, or one
// PostgreSQL store per replica on the same database.
func openStores(ctx context.Context, cfg ParkedConfig) ([]relayserver.Store, func(), error) {
	if cfg.DB == "" {
		dir, rm, err := workDir(cfg.Dir)
		if err != nil {
			return nil, nil, err
		}
		st, err := sqlitestore.Open(ctx, dir, nil)
		if err != nil {
			rm()
			return nil, nil, fmt.Errorf("relaybench: %w", err)
		}
		return []relayserver.Store{st}, func() { _ = st.Close(); rm() }, nil
	}
	// The run's tables go in a schema of their own, dropped at the end, so the bench neither
	// meets nor touches what the database already holds.
	url, dropSchema, err := benchSchema(ctx, cfg.DB)
	if err != nil {
		return nil, nil, err
	}
	var sts []relayserver.Store
	closeAll := func() {
		for _, st := range sts {
			_ = st.Close()
		}
		dropSchema()
	}
	for range cfg.Replicas {
		// The periodic re-check (every parked poll reads its queue once a minute) is left out,
		// so that it cannot land in the idle window: it is a burst of one read per parked poll.
		st, err := pgstore.Open(ctx, url, &pgstore.Options{Recheck: time.Hour})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("relaybench: %w", err)
		}
		sts = append(sts, st)
	}
	return sts, closeAll, nil
}

// benchSchema makes a fresh schema in the database at dbURL and returns a URL whose sessions use
// it, and a func that drops it.
func benchSchema(ctx context.Context, dbURL string) (string, func(), error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return "", nil, fmt.Errorf("relaybench: --db: %w", redact(err))
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "agentmbx_bench_" + hex.EncodeToString(rnd[:])
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", nil, fmt.Errorf("relaybench: --db: %w", redact(err))
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", nil, fmt.Errorf("relaybench: --db: create schema: %w", err)
	}
	drop := func() {
		c, err := pgx.ConnectConfig(context.Background(), cfg)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE")
			_ = c.Close(context.Background())
		}
	}
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	if !strings.Contains(dbURL, "://") { // a key=value DSN
		return dbURL + " search_path=" + name, drop, nil
	}
	return dbURL + sep + "search_path=" + name, drop, nil
}

// redact keeps a connection error from carrying the URL's password: pgx's errors name the host
// and user, never the password, but a parse error may quote the URL.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("cannot parse the database URL")
	}
	return err
}

// benchKey is the key of synthetic host i: derived from the run's seed, so the load children
// make the same keys without being sent them.
func benchKey(seed []byte, i int) mbx.SigningKey {
	h := sha256.New()
	h.Write(seed)
	_ = binary.Write(h, binary.BigEndian, uint64(i))
	k, err := mbx.GenerateSigningKey(bytes.NewReader(h.Sum(nil)))
	if err != nil {
		panic(err) // a 32-byte reader always serves a seed
	}
	return k
}

func benchName(i int) string { return "parked-" + strconv.Itoa(i) }

// enrolDirect writes the enrolments of hosts 0..n-1 into the store, as the relay's enrol endpoint
// would record a host-key enrolment (the endpoint's own cost is not what this bench measures).
func enrolDirect(ctx context.Context, st relayserver.Store, seed []byte, n int) error {
	now := time.Now().UTC()
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		err := st.Update(ctx, func(tx relayserver.Tx) error {
			for i := lo; i < hi; i++ {
				e := relayserver.Enrolment{HostPubkey: benchKey(seed, i).PublicKey(), HostName: benchName(i),
					AuthorizedBy: relayserver.HostKeyAuthority{}.Name(), EnrolledAt: now}
				if err := tx.PutEnrolment(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// parkedRelay is one relay served on loopback.
type parkedRelay struct {
	srv    *relayserver.Server
	hs     *http.Server
	base   string
	served chan error
}

func startParkedRelay(ctx context.Context, st relayserver.Store, opt relayserver.Options, held bool) (*parkedRelay, error) {
	srv, err := relayserver.New(ctx, st, opt)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := relayserver.NewHTTPServer(srv)
	if held {
		ln = srv.Listener(ln) // as relay serve does
	}
	r := &parkedRelay{srv: srv, hs: hs, base: "http://" + ln.Addr().String(), served: make(chan error, 1)}
	go func() { r.served <- hs.Serve(ln) }()
	return r, nil
}

func (r *parkedRelay) stop() {
	r.srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.hs.Shutdown(ctx); err != nil {
		_ = r.hs.Close()
	}
	<-r.served
}

// mem is a reading of this process's memory after a forced collection.
type mem struct {
	rss, heap  int64
	stack      int64
	goroutines int
}

func measureMem() mem {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{rss: readRSS(), heap: int64(ms.HeapInuse + ms.StackInuse), stack: int64(ms.StackInuse), goroutines: runtime.NumGoroutine()}
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("relaybench: heap profile: %w", err)
	}
	if err := errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close()); err != nil {
		return fmt.Errorf("relaybench: heap profile: %w", err)
	}
	return nil
}

// readRSS is this process's resident set size in bytes (0 where /proc does not say).
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}

// raiseNoFile raises this process's soft open-file limit to its hard limit and returns it.
func raiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return rl.Cur, err
		}
	}
	return rl.Cur, nil
}

// waitParked waits until srv has n polls parked, or a load child fails.
func waitParked(ctx context.Context, srv *relayserver.Server, n int, kids []*loaderProc) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	last, since := -1, time.Now()
	for {
		got := srv.Parked()
		if got == n {
			return nil
		}
		if got != last {
			last, since = got, time.Now()
		} else if time.Since(since) > time.Minute {
			return fmt.Errorf("relaybench: stuck at %d of %d polls parked for a minute", got, n)
		}
		for _, k := range kids {
			select {
			case rep := <-k.reports:
				if rep.Err != "" {
					return fmt.Errorf("relaybench: load process: %s", rep.Err)
				}
			default:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// loaderProc is one running load child: its config went in on stdin, its reports come out of
// stdout as JSON lines.
type loaderProc struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	enc     *json.Encoder
	reports chan loaderReport
	errOut  *bytes.Buffer
}

func startLoader(cmd *exec.Cmd, lc loaderConfig) (*loaderProc, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	k := &loaderProc{cmd: cmd, in: in, enc: json.NewEncoder(in), reports: make(chan loaderReport, 4), errOut: &bytes.Buffer{}}
	cmd.Stderr = k.errOut
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("relaybench: start load process: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 256<<20)
		for sc.Scan() {
			var rep loaderReport
			if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
				rep = loaderReport{Err: "unreadable report: " + clip(sc.Bytes())}
			}
			k.reports <- rep
		}
		select {
		case k.reports <- loaderReport{Err: "load process ended"}:
		default:
		}
	}()
	if err := k.enc.Encode(loaderCommand{Config: &lc}); err != nil {
		k.stop()
		return nil, fmt.Errorf("relaybench: load process: %w", err)
	}
	return k, nil
}

func (k *loaderProc) send(c loaderCommand) error {
	if err := k.enc.Encode(c); err != nil {
		return fmt.Errorf("relaybench: load process: %w", err)
	}
	return nil
}

// result waits for the child's report of its push phase.
func (k *loaderProc) result(ctx context.Context) (loaderReport, error) {
	select {
	case <-ctx.Done():
		return loaderReport{}, ctx.Err()
	case rep := <-k.reports:
		if rep.Err != "" {
			return rep, fmt.Errorf("relaybench: load process: %s %s", rep.Err, clip(k.errOut.Bytes()))
		}
		return rep, nil
	}
}

// stop ends the child: it exits when its stdin closes (its connections close with it).
func (k *loaderProc) stop() {
	_ = k.in.Close()
	done := make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = k.cmd.Process.Kill()
		<-done
	}
}
